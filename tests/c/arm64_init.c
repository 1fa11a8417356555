/*
 * /init of the arm64 VM that tests/c/arm64_vm.sh and .ci/lanes/arm64.sh boot:
 * it sets up the little the C harness and the Python layer need (/proc, /sys,
 * /dev, /dev/shm, /dev/pts, a console), loads the kernel modules the initramfs
 * holds for the running kernel, runs /harness, prints its exit status and
 * powers the VM off, so that qemu exits by itself.
 *
 * The same static binary is also the VM's /bin/true (the harness execs it):
 * anything but pid 1 just exits 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/module.h>
#include <linux/reboot.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * The soft-RoCE boot of .ci/lanes/arm64.sh: /lib/modules/RELEASE/modules.load
 * names the modules to load, one a line, each after its dependencies, for
 * the kernel RELEASE only (another kernel booting the same initramfs finds
 * no such file). finit_module() directly: the userland has no kmod, and the
 * kernel decompresses the .ko.xz itself (MODULE_INIT_COMPRESSED_FILE).
 */
static void load_modules(const char *release)
{
    char path[512], name[256];
    snprintf(path, sizeof path, "/lib/modules/%s/modules.load", release);
    FILE *list = fopen(path, "r");
    if (list == NULL)
        return;
    while (fgets(name, sizeof name, list) != NULL) {
        name[strcspn(name, "\n")] = '\0';
        if (name[0] == '\0')
            continue;
        snprintf(path, sizeof path, "/lib/modules/%s/%s", release, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        int flags = strstr(name, ".xz") != NULL ? MODULE_INIT_COMPRESSED_FILE : 0;
        if (fd < 0 || syscall(SYS_finit_module, fd, "", flags) != 0)
            printf("arm64-vm: module %s not loaded: %s\n", name, strerror(errno));
        else
            printf("arm64-vm: module %s loaded\n", name);
        if (fd >= 0)
            close(fd);
    }
    fclose(list);
}

int main(void)
{
    if (getpid() != 1)
        return 0;
    mkdir("/proc", 0755);
    mkdir("/sys", 0755);
    mkdir("/dev", 0755);
    mkdir("/tmp", 01777);
    mount("proc", "/proc", "proc", 0, NULL);
    /* libibverbs finds its devices under /sys/class/infiniband. */
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    /* The Python lane (.ci/lanes/arm64.sh) runs its script as /harness:
     * multiprocessing's SemLock needs a /dev/shm (sem_open), or fails with
     * FileNotFoundError. */
    mkdir("/dev/shm", 01777);
    mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777");
    /* os.forkpty() (the guard's tests): devtmpfs has /dev/ptmx, but the
     * terminal it opens is named under /dev/pts, or openpty fails ENOENT. */
    mkdir("/dev/pts", 0755);
    mount("devpts", "/dev/pts", "devpts", 0, "mode=620,ptmxmode=666");
    int console = open("/dev/console", O_RDWR);
    if (console >= 0) {
        for (int fd = 0; fd < 3; fd++)
            dup2(console, fd);
        if (console > 2)
            close(console);
    }
    struct utsname u;
    uname(&u);
    load_modules(u.release);
    printf("arm64-vm: kernel %s %s, running /harness\n", u.release, u.machine);
    fflush(stdout);

    int status = -1;
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = { "/harness", NULL }, *envp[] = { "PATH=/bin", NULL };
        execve(argv[0], argv, envp);
        _exit(127);
    }
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status))
        printf("arm64-vm: harness exit %d\n", WEXITSTATUS(status));
    else
        printf("arm64-vm: harness status 0x%x\n", status);
    fflush(stdout);
    sync();
    reboot(LINUX_REBOOT_CMD_POWER_OFF);
    return 1;   /* not reached: the kernel panics when init exits (panic=-1 reboots) */
}
