/*
 * The parent side of a spawn: stack, signals, clone, result.
 *
 * Every child shares the parent's memory (CLONE_VM) and the calling thread
 * sleeps until the child has exec'd or exited (CLONE_VFORK), so no page table
 * is copied and no MADV_DONTFORK page can go missing, unlike with fork().
 * This file never calls fork(), and the caller (cffi) has released the GIL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define RS_DEFINE_CLONE3_ENTRY
#include "arch.h"
#include "child.h"

#ifndef CLONE_PIDFD
#  define CLONE_PIDFD 0x00001000
#endif
#define RS_CLONE_CLEAR_SIGHAND 0x100000000ULL
#define RS_CLONE_INTO_CGROUP 0x200000000ULL

/* The child's stack: it needs little (no libc, a 2 KiB dirent buffer), but
 * sanitizers and -fstack-clash-protection want room. */
#define RS_STACK_SIZE (64 * 1024)

extern char **environ;

/* The kernel's struct clone_args, first version (Linux 5.3). */
struct rs_clone_args {
    uint64_t flags;
    uint64_t pidfd;
    uint64_t child_tid;
    uint64_t parent_tid;
    uint64_t exit_signal;
    uint64_t stack;
    uint64_t stack_size;
    uint64_t tls;
    uint64_t set_tid;           /* second version (Linux 5.5) */
    uint64_t set_tid_size;
    uint64_t cgroup;            /* third version (Linux 5.7): CLONE_INTO_CGROUP */
};
#define RS_CLONE_ARGS_SIZE_VER0 64

long rs_clone3_entry(struct rs_clone_args *args, size_t size,
                     int (*fn)(void *), void *arg)
    __attribute__((visibility("hidden")));

/* 1: clone3() with CLONE_CLEAR_SIGHAND works; -1: it does not (old kernel,
 * or a seccomp filter that answers ENOSYS); 0: not tried yet. Every thread
 * may race to find out; they all reach the same answer. */
static int clone3_state;

static const char *const step_names[] = {
    [RS_STEP_NONE] = "none",
    [RS_STEP_STACK] = "mmap",
    [RS_STEP_CLONE] = "clone",
    [RS_STEP_KEEP_FDS] = "pass_fds",
    [RS_STEP_DUP] = "dup",
    [RS_STEP_DUP2] = "dup2",
    [RS_STEP_CHDIR] = "chdir",
    [RS_STEP_SIGNALS] = "sigprocmask",
    [RS_STEP_SETSID] = "setsid",
    [RS_STEP_SETPGID] = "setpgid",
    [RS_STEP_SETGROUPS] = "setgroups",
    [RS_STEP_SETGID] = "setresgid",
    [RS_STEP_SETUID] = "setresuid",
    [RS_STEP_CLOSE_FDS] = "close_fds",
    [RS_STEP_EXEC] = "execve",
    [RS_STEP_PREPARE] = "malloc",
};

const char *rs_step_name(int step)
{
    const char *setup_name = rs_setup_step_name(step);
    if (setup_name)
        return setup_name;
    if (step < 0 || step >= (int)(sizeof step_names / sizeof *step_names))
        return "unknown";
    return step_names[step];
}

void rs_split_blob(const char *blob, int n, char **out)
{
    for (int i = 0; i < n; i++) {
        out[i] = (char *)blob;
        blob += strlen(blob) + 1;
    }
    out[n] = NULL;
}

static long clone_with_clone3(struct rs_child *c, char *stack, size_t size,
                              int want_pidfd, int *pidfd)
{
    struct rs_clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_VM | CLONE_VFORK | RS_CLONE_CLEAR_SIGHAND |
                 (want_pidfd ? CLONE_PIDFD : 0);
    args.pidfd = (uint64_t)(uintptr_t)pidfd;
    args.exit_signal = SIGCHLD;
    args.stack = (uint64_t)(uintptr_t)stack;
    args.stack_size = size;
    c->handlers_cleared = 1;
    const struct rs_setup *setup = c->req->setup;
    if (c->in_cgroup) {
        args.flags |= RS_CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)setup->cgroup_fd;
        return rs_clone3_entry(&args, sizeof args, rs_child_main, c);
    }
    return rs_clone3_entry(&args, RS_CLONE_ARGS_SIZE_VER0, rs_child_main, c);
}

/* glibc's clone() runs fn on the given stack and exits with its value. */
static long clone_with_glibc(struct rs_child *c, char *stack, size_t size,
                             int want_pidfd, int *pidfd)
{
    int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
    c->handlers_cleared = 0;
    long pid = clone(rs_child_main, stack + size,
                     flags | (want_pidfd ? CLONE_PIDFD : 0), c, pidfd, NULL, NULL);
    if (pid < 0 && errno == EINVAL && want_pidfd) {
        /* Linux < 5.2 has no CLONE_PIDFD. */
        *pidfd = -1;
        pid = clone(rs_child_main, stack + size, flags, c, pidfd, NULL, NULL);
    }
    return pid < 0 ? -errno : pid;
}

static long start_child(struct rs_child *c, char *stack, size_t size,
                        int *pidfd, int *method)
{
    const struct rs_request *r = c->req;
    int state = __atomic_load_n(&clone3_state, __ATOMIC_RELAXED);
    if (state >= 0 && !r->force_clone && r->setup && r->setup->cgroup_fd >= 0) {
        /* Straight into the cgroup; on any failure (Linux < 5.7, or a cgroup
         * that refuses) the child joins through cgroup.procs instead, and
         * reports the error of that. */
        c->in_cgroup = 1;
        long pid = clone_with_clone3(c, stack, size, r->want_pidfd, pidfd);
        c->in_cgroup = 0;
        if (pid > 0) {
            c->in_cgroup = 1;
            *method = RS_CLONE_CLONE3;
            return pid;
        }
    }
    if (state >= 0 && !r->force_clone) {
        long pid = clone_with_clone3(c, stack, size, r->want_pidfd, pidfd);
        if (pid != -ENOSYS && pid != -EINVAL && pid != -EPERM) {
            if (state == 0 && pid > 0)
                __atomic_store_n(&clone3_state, 1, __ATOMIC_RELAXED);
            *method = RS_CLONE_CLONE3;
            return pid;
        }
        /* No clone3(), or none with CLONE_CLEAR_SIGHAND (Linux < 5.5). */
        __atomic_store_n(&clone3_state, -1, __ATOMIC_RELAXED);
    }
    *method = RS_CLONE_CLONE;
    return clone_with_glibc(c, stack, size, r->want_pidfd, pidfd);
}

/*
 * The child's stack: one per spawning thread, mapped on first use and kept,
 * with a guard page below it so that an overflow faults instead of
 * scribbling over whatever the parent mapped there. Reuse is safe: when
 * clone returns in the parent, the child has exec'd or exited and runs on it
 * no more. Keeping it saves an mmap, an mprotect, page faults and, worst, a
 * munmap that must shoot down the TLB of the CPU the child ran on.
 */
static pthread_key_t stack_key;
static pthread_once_t stack_once = PTHREAD_ONCE_INIT;
static size_t stack_total;

static void free_stack(void *map)
{
    munmap(map, stack_total);
}

static void make_stack_key(void)
{
    stack_total = RS_STACK_SIZE + (size_t)sysconf(_SC_PAGESIZE);
    if (pthread_key_create(&stack_key, free_stack) != 0)
        stack_total = 0;    /* no key: map a stack per spawn instead */
}

/* The lowest usable address of this thread's stack, or NULL (errno set). */
static char *thread_stack(int *owned)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *map;

    pthread_once(&stack_once, make_stack_key);
    *owned = 0;
    if (stack_total && (map = pthread_getspecific(stack_key)) != NULL)
        return map + page;
    map = mmap(NULL, RS_STACK_SIZE + page, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    if (mprotect(map + page, RS_STACK_SIZE, PROT_READ | PROT_WRITE) != 0) {
        int err = errno;
        munmap(map, RS_STACK_SIZE + page);
        errno = err;
        return NULL;
    }
    if (!stack_total || pthread_setspecific(stack_key, map) != 0)
        *owned = 1;
    return map + page;
}

/*
 * Does a CLONE_VM child share our memory? On every real kernel, yes. But
 * valgrind and qemu-user run CLONE_VM|CLONE_VFORK as a plain fork, and then
 * the child's report written into memory never reaches us: a missing
 * executable would look like a child that exits 255. Asked once per process
 * with a child that only sets a flag; where the answer is no, the child
 * reports through a CLOEXEC pipe instead. 1: shared, -1: not, 0: not asked.
 */
static int memory_shared;

static int set_flag(void *flag)
{
    *(volatile int *)flag = 1;
    return 0;
}

static int memory_is_shared(char *stack)
{
    int state = __atomic_load_n(&memory_shared, __ATOMIC_RELAXED);
    if (state == 0) {
        volatile int flag = 0;
        long pid = clone(set_flag, stack + RS_STACK_SIZE,
                         CLONE_VM | CLONE_VFORK | SIGCHLD, (void *)&flag,
                         NULL, NULL, NULL);
        if (pid < 0)
            return 1;   /* the spawn itself will fail and say why */
        while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
            ;
        state = flag ? 1 : -1;
        __atomic_store_n(&memory_shared, state, __ATOMIC_RELAXED);
    }
    return state > 0;
}

/* Pipe mode: keep_fds plus the report fd, still ascending, in *merged. */
static int add_report_fd(struct rs_request *r, int fd, int **merged)
{
    int n = r->n_keep_fds, j = 0;
    int *out = malloc(((size_t)n + 1) * sizeof *out);
    if (!out)
        return -1;
    for (int i = 0; i < n; i++) {
        if (j == i && r->keep_fds[i] > fd)
            out[j++] = fd;
        out[j++] = r->keep_fds[i];
    }
    if (j == n)
        out[j++] = fd;
    r->keep_fds = out;
    r->n_keep_fds = n + 1;
    *merged = out;
    return 0;
}

static void read_report(int fd, struct rs_child *c)
{
    int msg[2];
    ssize_t n;
    while ((n = read(fd, msg, sizeof msg)) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof msg) {
        c->err = msg[0];
        c->step = msg[1];
    }
}

int rs_spawn(const struct rs_request *req, struct rs_result *res)
{
    int saved_errno = errno;
    struct rs_request r = *req;
    struct rs_child c;
    uint64_t all = ~(uint64_t)0;
    int pidfd = -1, owned, report[2] = { -1, -1 };
    int *merged = NULL;

    res->pid = -1;
    res->pidfd = -1;
    res->err = 0;
    res->step = RS_STEP_NONE;
    res->clone_method = RS_CLONE_NONE;

    memset(&c, 0, sizeof c);
    c.req = &r;
    c.envp = r.envp ? r.envp : environ;
    c.report_fd = -1;

    char *stack = thread_stack(&owned);
    if (!stack) {
        res->err = errno;
        res->step = RS_STEP_STACK;
        errno = saved_errno;
        return res->err;
    }

    /* Block everything, glibc's SIGCANCEL and SIGSETXID too (hence the raw
     * call: pthread_sigmask() refuses those), so that no handler runs in the
     * child before it has reset them; the child inherits this mask. */
    rs_sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&c.mask,
            sizeof(uint64_t));
    long pid;
    if (!memory_is_shared(stack) &&
        (pipe2(report, O_CLOEXEC) < 0 ||
         (r.close_fds && add_report_fd(&r, report[1], &merged) < 0))) {
        pid = -errno;
    } else {
        c.report_fd = report[1];
        pid = start_child(&c, stack, RS_STACK_SIZE, &pidfd, &res->clone_method);
    }
    rs_sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&c.mask, 0,
            sizeof(uint64_t));
    if (owned)
        munmap(stack - sysconf(_SC_PAGESIZE), RS_STACK_SIZE + sysconf(_SC_PAGESIZE));
    if (report[1] >= 0) {
        close(report[1]);
        if (pid > 0)
            read_report(report[0], &c);   /* EOF at the child's exec or exit */
        close(report[0]);
    }
    free(merged);

    if (pid < 0) {
        res->err = (int)-pid;
        res->step = RS_STEP_CLONE;
        errno = saved_errno;
        return res->err;
    }
    res->pid = (int)pid;
    res->pidfd = pidfd;
    if (c.err) {
        res->err = c.err;
        res->step = c.step;
        if (pidfd >= 0) {
            close(pidfd);
            res->pidfd = -1;
        }
        if (r.reap_on_failure) {
            while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
    }
    errno = saved_errno;
    return res->err;
}
