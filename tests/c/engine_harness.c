/*
 * The C engine on its own: rs_spawn() and friends linked straight from csrc/,
 * with no Python, so that it can run under AddressSanitizer, UBSan, valgrind
 * and qemu-user. tests/test_c_harness.py builds and runs it.
 *
 *   cc -std=gnu11 -Wall -Wextra -DRS_MEASURE_STACK -Icsrc tests/c/engine_harness.c \
 *      csrc/spawn.c csrc/child.c csrc/report.c csrc/forkinit.c csrc/setup.c \
 *      -ldl -lpthread
 *
 * Prints one "ok N - what" / "not ok N - what" line per check, "# ..." notes
 * (which clone path ran, the fork status), then "N passed, N failed, N todo";
 * exits 1 if anything failed. Run with an argument it is a child that inspects
 * itself (see child_mode()); RS_HARNESS_WRAP=/path/to/qemu-aarch64 makes those
 * children run through that program (no binfmt_misc needed), and
 * RS_HARNESS_NO_THREADS=1 skips the threads check: qemu-user 7.2 leaves some
 * children forked from a multi-threaded process deadlocked inside qemu.
 *
 * valgrind and qemu-user run a CLONE_VM|CLONE_VFORK child as a plain fork, so
 * a report written into private memory never reaches the parent (glibc's own
 * posix_spawn() loses its errors there); the engine's child also writes it
 * into a MAP_SHARED page, which valgrind's parent reads after the child is
 * done (it keeps the vfork wait), so the failure checks pass there too.
 * qemu-user neither waits nor has CLONE_PIDFD: probe() finds that out with a
 * bare clone(), independently of the engine, and those checks are "# TODO"
 * there. A second thread forks throughout (unless RS_HARNESS_NO_THREADS), its
 * children living to the end, so that a spawn that waited on something
 * they inherited would hang the harness.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdmaspawn.h"
#include "child.h"      /* RS_CHILD_STACK_SIZE */

static int n_pass, n_fail, n_todo;
static char self[PATH_MAX];
static const char *todo;        /* set: a failing check is expected here */

static void check(int ok, const char *what, int line)
{
    printf("%sok %d - %s", ok ? "" : "not ", n_pass + n_fail + n_todo + 1, what);
    if (todo && !ok)
        printf(" # TODO %s", todo);
    printf(ok || todo ? "\n" : " (line %d)\n", line);
    ok ? n_pass++ : todo ? n_todo++ : n_fail++;
}
#define CHECK(cond, what) check(!!(cond), what, __LINE__)

/* What the "kernel" under us does with CLONE_VM|CLONE_VFORK and CLONE_PIDFD. */
static int shares_vm = 1, waits = 1, has_pidfd = 1;
static volatile int probe_wrote;

/* Writes our memory (seen only if shared) and, after a pause, a MAP_SHARED
 * page (seen when clone returns only if the parent waited for the child). */
static int probe_child(void *page)
{
    struct timespec pause = { 0, 50 * 1000 * 1000 };
    probe_wrote = 1;
    nanosleep(&pause, NULL);
    *(volatile int *)page = 1;
    return 0;
}

static void probe(void)
{
    static char stack[16384] __attribute__((aligned(16)));
    int pidfd = -1, flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
    int *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int pid = clone(probe_child, stack + sizeof stack, flags | CLONE_PIDFD, page, &pidfd);
    if (pid < 0 && errno == EINVAL) {
        has_pidfd = 0;
        pid = clone(probe_child, stack + sizeof stack, flags, page);
    }
    waits = *(volatile int *)page;
    if (pid > 0)
        waitpid(pid, NULL, 0);
    if (pidfd >= 0)
        close(pidfd);
    munmap(page, 4096);
    shares_vm = probe_wrote;
    printf("# environment: CLONE_VM child %s, CLONE_VFORK %s, CLONE_PIDFD %s\n",
           shares_vm ? "shares our memory" : "DOES NOT share our memory (runs as fork)",
           waits ? "waits" : "DOES NOT wait",
           has_pidfd ? "works" : "UNSUPPORTED");
}

/* ---- child modes: what the spawned program sees -------------------------- */

static void request(struct rs_request *r, char *const *argv, char *const *exe);
static int wait_exit(int pid);

/* 0 if a spawn of /bin/true works and one of a missing program says ENOENT
 * at execve: the engine under pressure, on the first spawn of a process (its
 * stack and report page not mapped yet). Bit 0: true failed, bit 1: the
 * failure was not reported. */
static int two_spawns(void)
{
    char *argv[] = { "true", NULL }, *ok[] = { "/bin/true", NULL };
    char *missing[] = { "/nonexistent/true", NULL };
    struct rs_request r;
    struct rs_result res;
    int bad = 0;
    request(&r, argv, ok);
    if (rs_spawn(&r, &res) != 0 || wait_exit(res.pid) != 0)
        bad |= 1;
    r.exec_list = missing;
    if (rs_spawn(&r, &res) != ENOENT || res.step != RS_STEP_EXEC)
        bad |= 2;
    return bad;
}

/* Use up every free mapping slot (vm.max_map_count) of this process by
 * splitting one reservation into single pages of alternating protection,
 * then spawn (no map slot free), then free one slot and spawn again. This
 * process only: the system's limit is left alone. 4: could not use them up. */
static int spawn_without_map_slots(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = 1 << 18;
    char *region = mmap(NULL, pages * page, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    size_t i;
    if (region == MAP_FAILED)
        return 4;
    for (i = 1; i < pages; i += 2)
        if (mprotect(region + i * page, page, PROT_READ) != 0)
            break;
    if (i >= pages || errno != ENOMEM)
        return 16;
    int bad = two_spawns();
    munmap(region, page);       /* page 0 was a mapping of its own */
    return bad | two_spawns() << 2;
}

/* Spawn with no address space to spare (RLIMIT_AS just above what we use). */
static int spawn_with_tight_as(void)
{
    char line[256];
    unsigned long kib = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "VmSize: %lu kB", &kib);
    if (f)
        fclose(f);
    struct rlimit rl = { (kib + 4) * 1024, RLIM_INFINITY };
    if (!kib || setrlimit(RLIMIT_AS, &rl) != 0)
        return 16;
    return two_spawns();
}

/* --exit N: exit N.  --fds k3 g4 ...: 0 if every k fd is open and every g fd
 * closed.  --stdio: copy stdin to stdout and stderr, each with a prefix.
 * --signals: bit 0: SIGUSR2 blocked, 1: SIGUSR1 blocked, 2: SIGPIPE ignored.
 * --cwd DIR: 0 if the working directory is DIR.
 * --setup NICE: bit 0: RLIMIT_MSGQUEUE soft 4096, 1: nice NICE, 2: SIGUSR1 ignored,
 * 3: SIGUSR2 blocked, 4: death signal SIGTERM, 5: no_new_privs, 6: CPU 0 only. */
static int child_mode(int argc, char **argv)
{
    char buf[PATH_MAX];
    sigset_t set;
    struct sigaction sa;
    if (!strcmp(argv[1], "--exit"))
        return atoi(argv[2]);
    if (!strcmp(argv[1], "--fds")) {
        for (int i = 2; i < argc; i++)
            if ((fcntl(atoi(argv[i] + 1), F_GETFD) >= 0) != (argv[i][0] == 'k'))
                return 10 + i;
        return 0;
    }
    if (!strcmp(argv[1], "--stdio")) {
        ssize_t n = read(0, buf, 64);
        return n < 0 || dprintf(1, "out:%.*s", (int)n, buf) < 0 ||
               dprintf(2, "err:%.*s", (int)n, buf) < 0 ? 3 : 0;
    }
    if (!strcmp(argv[1], "--signals")) {
        sigprocmask(SIG_BLOCK, NULL, &set);
        sigaction(SIGPIPE, NULL, &sa);
        return sigismember(&set, SIGUSR2) | sigismember(&set, SIGUSR1) << 1 |
               (sa.sa_handler == SIG_IGN) << 2;
    }
    if (!strcmp(argv[1], "--cwd"))
        return !(getcwd(buf, sizeof buf) && !strcmp(buf, argv[2]));
    if (!strcmp(argv[1], "--setup")) {
        struct rlimit rl;
        cpu_set_t cpus;
        int sig = 0;
        getrlimit(RLIMIT_MSGQUEUE, &rl);
        sigprocmask(SIG_BLOCK, NULL, &set);
        sigaction(SIGUSR1, NULL, &sa);
        prctl(PR_GET_PDEATHSIG, &sig, 0, 0, 0);
        sched_getaffinity(0, sizeof cpus, &cpus);
        return (rl.rlim_cur == 4096) | (getpriority(PRIO_PROCESS, 0) == atoi(argv[2])) << 1 |
               (sa.sa_handler == SIG_IGN) << 2 | sigismember(&set, SIGUSR2) << 3 |
               (sig == SIGTERM) << 4 | (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1) << 5 |
               (CPU_COUNT(&cpus) == 1 && CPU_ISSET(0, &cpus)) << 6;
    }
    /* _exit: no exit handlers (LeakSanitizer's) in a process out of memory. */
    if (!strcmp(argv[1], "--no-map-slots"))
        _exit(spawn_without_map_slots());
    if (!strcmp(argv[1], "--tight-as"))
        _exit(spawn_with_tight_as());
    return 99;
}

/* ---- helpers --------------------------------------------------------------- */

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static void request(struct rs_request *r, char *const *argv, char *const *exe)
{
    memset(r, 0, sizeof *r);
    r->argv = argv;
    r->exec_list = exe;
    r->stdin_fd = r->stdout_fd = r->stderr_fd = -1;
    r->close_fds = 1;
    r->umask = -1;
    r->restore_signals = 1;
    r->pgid = -1;
    r->reap_on_failure = 1;
    r->fail_status = 255;
}

/* Wait for pid; its exit status, or -1 (not exited normally / no child). */
static int wait_exit(int pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Spawn this harness as a child: argv = [self, mode, args...]; its exit status. */
static int run_self(struct rs_request *r, struct rs_result *res, char **args)
{
    char *argv[16], *exe[2] = { NULL, NULL };
    int n = 0;
    const char *wrap = getenv("RS_HARNESS_WRAP");
    if (wrap && *wrap)
        argv[n++] = (char *)wrap;
    argv[n++] = self;
    while (*args && n < 15)
        argv[n++] = *args++;
    argv[n] = NULL;
    exe[0] = argv[0];
    r->argv = argv;
    r->exec_list = exe;
    if (rs_spawn(r, res) != 0)
        return -2;
    return wait_exit(res->pid);
}

/* ---- the checks ------------------------------------------------------------ */

/* A thread that forks now and then while the checks run; its children sleep
 * until the end, holding whatever they inherited (an fd the engine opened
 * for a spawn in flight, say): no spawn may wait on them. */
#define N_FORKED 48
static pid_t forked[N_FORKED];
static volatile int n_forked, forking;
static pthread_t forker_thread;

static void *forker(void *arg)
{
    struct timespec gap = { 0, 4 * 1000 * 1000 };
    (void)arg;
    while (forking && n_forked < N_FORKED) {
        pid_t pid = fork();
        if (pid == 0) {
            for (;;)
                pause();
        }
        if (pid > 0)
            forked[n_forked++] = pid;
        nanosleep(&gap, NULL);
    }
    return NULL;
}

static void start_forking(void)
{
    if (getenv("RS_HARNESS_NO_THREADS"))
        return;
    forking = 1;
    if (pthread_create(&forker_thread, NULL, forker, NULL) != 0)
        forking = 0;
}

static void stop_forking(void)
{
    if (!forking)
        return;
    forking = 0;
    pthread_join(forker_thread, NULL);
    for (int i = 0; i < n_forked; i++) {
        kill(forked[i], SIGKILL);
        waitpid(forked[i], NULL, 0);
    }
    printf("# a second thread forked %d children during the checks\n", n_forked);
    CHECK(n_forked > 0, "fork() in a second thread ran alongside the spawns");
}

/* The engine under memory pressure (a fresh process each: the engine maps
 * its stack and report page once per thread / process). */
static void test_pressure(void)
{
    char *slots[] = { "--no-map-slots", NULL }, *as[] = { "--tight-as", NULL };
    struct rs_request r;
    struct rs_result res;
    /* Where the parent does not wait, no failure can be reported (bits 1, 3). */
    int ignored = waits ? 0 : 2 | 8, rc;
    request(&r, NULL, NULL);
    rc = run_self(&r, &res, slots) & ~ignored;
    CHECK(rc == 0, "no free mapping slot, then one: spawns work and report (caller's stack)");
    if (rc)
        printf("#   --no-map-slots exited %d\n", rc);
    rc = run_self(&r, &res, as) & ~ignored;
    CHECK(rc == 0, "RLIMIT_AS at our size + 4 KiB: spawns work and report");
    if (rc)
        printf("#   --tight-as exited %d\n", rc);
}

#ifdef RS_MEASURE_STACK
/* The deepest failure there is: every step, a setup, the /proc walk, exec
 * misses. */
static void test_stack_depth(void)
{
    char *exe[] = { "/nonexistent/a", "/nonexistent/b", NULL }, *argv[] = { "true", NULL };
    static const int keep[] = { 0, 1, 2 };
    struct rlimit now;
    struct rs_rlimit limit = { RLIMIT_MSGQUEUE, 0, 0 };
    struct rs_setup s;
    struct rs_request r;
    struct rs_result res;
    size_t deepest = 0;
    getrlimit(RLIMIT_MSGQUEUE, &now);
    limit.soft = now.rlim_cur;
    limit.hard = now.rlim_max;
    memset(&s, 0, sizeof s);
    s.cgroup_fd = s.cgroup_procs_fd = s.ctty_fd = -1;
    s.rlimits = &limit;
    s.n_rlimits = 1;
    s.ignore_signals = 1ULL << (SIGUSR1 - 1);
    s.set_signal_mask = 1;
    s.signal_mask = 1ULL << (SIGUSR2 - 1);
    for (int force = 0; force <= 1; force++) {
        request(&r, argv, exe);
        r.force_clone = force;
        r.close_method = RS_CLOSE_PROC;
        r.keep_fds = keep;
        r.n_keep_fds = 3;
        r.stdin_fd = 0;
        r.stdout_fd = 1;
        r.stderr_fd = 2;
        r.cwd = "/";
        r.umask = 022;
        r.setup = &s;
        rs_spawn(&r, &res);
        if (rs_child_stack_used > deepest)
            deepest = rs_child_stack_used;
    }
    printf("# child stack: %zu of %d bytes used\n", deepest, RS_CHILD_STACK_SIZE);
    if (!shares_vm) {
        printf("# child stack: not measurable here (the child wrote a copy)\n");
        return;
    }
    CHECK(deepest > 0 && deepest <= RS_CHILD_STACK_SIZE / 2,
          "the child uses at most half of its stack");
}

/* One spawn on a thread of its own; the stack its child ran on. */
static void *spawn_on_new_thread(void *rc)
{
    char *argv[] = { "--exit", "0", NULL };
    struct rs_request r;
    struct rs_result res;
    request(&r, NULL, NULL);
    *(int *)rc = run_self(&r, &res, argv);
    return rs_child_stack_last;
}

/* A thread's child stack outlives the thread: the next thread to spawn takes
 * it rather than mapping one (spawn.c's spare stacks). A mapping made in
 * between sits where an unmapped stack would have left a hole, so that a
 * new mapping cannot land on the same address by chance. */
static void test_stack_reuse(void)
{
    size_t size = RS_CHILD_STACK_SIZE + (size_t)sysconf(_SC_PAGESIZE);
    int rc_a = -1, rc_b = -1;
    void *a = NULL, *b = NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, spawn_on_new_thread, &rc_a) == 0)
        pthread_join(t, &a);
    void *squat = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pthread_create(&t, NULL, spawn_on_new_thread, &rc_b) == 0)
        pthread_join(t, &b);
    CHECK(rc_a == 0 && rc_b == 0 && a && a == b,
          "stack: an exited thread's child stack is taken by the next thread");
    if (squat != MAP_FAILED)
        munmap(squat, size);
}
#endif

static char *true_argv[] = { "true", NULL };

static void test_success(int force)
{
    char *exe[] = { "/nonexistent/true", "/bin/true", NULL };
    char *seven[] = { "--exit", "7", NULL };
    struct rs_request r;
    struct rs_result res;
    request(&r, true_argv, exe);
    r.force_clone = force;
    errno = 4242;
    int rc = rs_spawn(&r, &res);
    CHECK(rc == 0 && res.err == 0 && res.step == RS_STEP_NONE && errno == 4242,
          "true: rc 0, errno untouched");
    CHECK(res.pid > 0 && res.pidfd == -1 && wait_exit(res.pid) == 0,
          "true: pid, no pidfd unless asked, exit status 0");
    CHECK(force ? res.clone_method == RS_CLONE_CLONE : res.clone_method != RS_CLONE_NONE,
          "clone method as asked");
    printf("# force_clone=%d: %s\n", force, res.clone_method == RS_CLONE_CLONE3 ? "clone3"
           : res.clone_method == RS_CLONE_CLONE ? "clone" : "none");
    request(&r, NULL, NULL);
    r.force_clone = force;
    CHECK(run_self(&r, &res, seven) == 7, "exit status 7 comes back");
}

static void expect_fail(struct rs_request *r, int err, int step, const char *what)
{
    struct rs_result res;
    errno = 4242;
    int rc = rs_spawn(r, &res);
    todo = waits ? NULL : "the parent does not wait: the report comes too late";
    CHECK(rc == err && res.err == err && res.step == step && errno == 4242 &&
          res.pid > 0 && res.pidfd == -1, what);
    todo = NULL;
    if (rc != err || res.step != step)
        printf("#   got rc %d (%s) step %s\n", rc, strerror(rc), rs_step_name(res.step));
    if (rc == 0) {              /* "succeeded": no error came back */
        printf("#   the child exited %d\n", wait_exit(res.pid));
        if (res.pidfd >= 0)
            close(res.pidfd);
    } else if (r->reap_on_failure) {
        CHECK(waitpid(res.pid, NULL, WNOHANG) < 0 && errno == ECHILD,
              "reap_on_failure=1: already reaped");
    } else {
        CHECK(wait_exit(res.pid) == r->fail_status, "reap_on_failure=0: exits with fail_status");
    }
}

static void test_failures(int force, const char *noexec)
{
    char *enoent[] = { "/nonexistent/a", "/nonexistent/b", NULL };
    char *eacces[] = { (char *)noexec, NULL };
    char *first[] = { "/nonexistent/a", (char *)noexec, "/etc/passwd/x", NULL };
    char *enotdir[] = { "/nonexistent/a", "/etc/passwd/x", NULL };
    char *ok[] = { "/bin/true", NULL };
    struct rs_request r;

    request(&r, true_argv, enoent);
    r.force_clone = force;
    expect_fail(&r, ENOENT, RS_STEP_EXEC, "exec: ENOENT");
    r.reap_on_failure = 0;
    expect_fail(&r, ENOENT, RS_STEP_EXEC, "exec: ENOENT, not reaped");
    r.reap_on_failure = 1;
    r.exec_list = eacces;
    expect_fail(&r, EACCES, RS_STEP_EXEC, "exec: EACCES");
    r.exec_list = first;
    expect_fail(&r, EACCES, RS_STEP_EXEC, "exec: first error that is not ENOENT/ENOTDIR");
    r.exec_list = enotdir;
    expect_fail(&r, ENOTDIR, RS_STEP_EXEC, "exec: only misses -> the last one");
    r.exec_list = ok;
    r.cwd = "/nonexistent";
    r.want_pidfd = 1;
    expect_fail(&r, ENOENT, RS_STEP_CHDIR, "chdir: ENOENT, pidfd asked");

    char *cwd[] = { "--cwd", "/", NULL };
    request(&r, NULL, NULL);
    r.force_clone = force;
    r.cwd = "/";
    CHECK(run_self(&r, &(struct rs_result){0}, cwd) == 0, "chdir: child runs in cwd");
}

static void test_pidfd(int force)
{
    char *exe[] = { "/bin/true", NULL };
    char path[64], buf[512], want[32];
    struct rs_request r;
    struct rs_result res;
    request(&r, true_argv, exe);
    r.force_clone = force;
    r.want_pidfd = 1;
    todo = has_pidfd ? NULL : "no CLONE_PIDFD here";
    CHECK(rs_spawn(&r, &res) == 0 && res.pidfd >= 0, "want_pidfd: pidfd given");
    todo = NULL;
    if (res.pidfd < 0) {
        CHECK(res.pid > 0 && wait_exit(res.pid) == 0, "want_pidfd: child without pidfd exits 0");
        return;
    }
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", res.pidfd);
    snprintf(want, sizeof want, "Pid:\t%d\n", res.pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    buf[n > 0 ? n : 0] = '\0';
    CHECK(fcntl(res.pidfd, F_GETFD) == FD_CLOEXEC && strstr(buf, want),
          "pidfd is O_CLOEXEC and refers to the child");
    close(fd);
    close(res.pidfd);
    CHECK(wait_exit(res.pid) == 0, "pidfd child exits 0");
}

/* fds 20 and 22 are passed (CLOEXEC, so the child must clear it); 21, 23, 24
 * and the lowest free fd are inheritable, so only closing makes them go. */
static void test_pass_fds(int force)
{
    static const int keep[] = { 20, 22 };
    static const char *names[] = { "auto", "proc", "loop" };
    char gone[16], kept[16], what[80];
    char *closed[] = { "--fds", "k0", "k1", "k2", "k20", "k22", "g21", "g23", "g24", gone, NULL };
    char *open_[] = { "--fds", "k20", "k21", "k22", "k23", "k24", kept, NULL };
    struct rs_request r;
    struct rs_result res;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 20; fd <= 24; fd++)
        dup3(null, fd, fd == 20 || fd == 22 ? O_CLOEXEC : 0);
    close(null);
    int low = fcntl(20, F_DUPFD, 3);
    snprintf(gone, sizeof gone, "g%d", low);
    snprintf(kept, sizeof kept, "k%d", low);

    for (int m = RS_CLOSE_AUTO; m <= RS_CLOSE_LOOP + 1; m++) {
        request(&r, NULL, NULL);
        r.force_clone = force;
        r.keep_fds = keep;
        r.n_keep_fds = 2;
        r.close_fds = m <= RS_CLOSE_LOOP;
        r.close_method = m;
        r.max_fd = m == RS_CLOSE_LOOP ? 64 : 0;
        if (r.close_fds)
            snprintf(what, sizeof what, "close_fds=1 (%s): pass_fds kept, others closed", names[m]);
        CHECK(run_self(&r, &res, r.close_fds ? closed : open_) == 0,
              r.close_fds ? what : "close_fds=0: the inheritable fd stays");
    }
    CHECK(fcntl(20, F_GETFD) == FD_CLOEXEC, "parent's pass_fds keep CLOEXEC");
    for (int fd = 20; fd <= 24; fd++)
        close(fd);
    close(low);
}

/* A copy of fd at or above 30 (CLOEXEC, as the parent's own are); fd closed. */
static int high(int fd)
{
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 30);
    close(fd);
    return h;
}

/* What the child wrote into a pipe: everything, as it has exited, and read
 * without waiting for EOF (the read end is O_NONBLOCK), for EOF may never
 * come: a child that the forker thread forked while this process had the
 * write end open holds it to the end. -1 on error. */
static int written(int fd, char *buf, size_t size)
{
    ssize_t n = read(fd, buf, size - 1);
    if (n < 0 && errno == EAGAIN)
        n = 0;                  /* nothing, and a writer is still open */
    buf[n > 0 ? n : 0] = '\0';
    return n < 0 ? -1 : 0;
}

/* stdin from a pipe, stdout and stderr to pipes, with the child's ends sitting
 * at fds 0/1/2 of the parent in the ways that could clobber each other. A
 * child forked right after the pipes were made holds every end throughout,
 * as one of the forker thread's children now and then did in the arm64 VM
 * (where a read that waited for EOF on the unused stderr pipe then hung). */
static void test_stdio(int force)
{
    static const struct { int in, out, err; const char *what; } cases[] = {
        { 5, 0, 1, "stdio: stdout given as fd 0, stderr as fd 1" },
        { 2, 1, 0, "stdio: stdin 2, stdout 1 (in place), stderr 0" },
        { 0, 6, 6, "stdio: stdin in place at 0 (CLOEXEC), stdout == stderr" },
    };
    char *argv[] = { "--stdio", NULL };
    int saved[3];
    fflush(stdout);
    for (int i = 0; i < 3; i++)
        saved[i] = fcntl(i, F_DUPFD_CLOEXEC, 10);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int in[2], out[2], err[2], at[3] = { cases[c].in, cases[c].out, cases[c].err };
        char got_out[64] = "", got_err[64] = "";
        struct rs_request r;
        struct rs_result res;
        if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
            abort();
        pid_t holder = fork();
        if (holder == 0) {
            for (;;)
                pause();
        }
        int ends[3] = { high(in[0]), high(out[1]), high(err[1]) };
        int in_w = high(in[1]), out_r = high(out[0]), err_r = high(err[0]);
        fcntl(out_r, F_SETFL, O_NONBLOCK);
        fcntl(err_r, F_SETFL, O_NONBLOCK);
        for (int k = 0; k < 3; k++) {
            if (k == 0 || at[k] != at[k - 1])
                dup3(ends[k], at[k], O_CLOEXEC);
            close(ends[k]);
        }
        int status = write(in_w, "ping", 4) == 4 ? 0 : -3;
        close(in_w);
        request(&r, NULL, NULL);
        r.force_clone = force;
        r.stdin_fd = at[0];
        r.stdout_fd = at[1];
        r.stderr_fd = at[2];
        if (status == 0)
            status = run_self(&r, &res, argv);
        for (int k = 0; k < 3; k++)     /* the parent's write ends, then ours back */
            close(at[k]);
        for (int i = 0; i < 3; i++)
            dup3(saved[i], i, 0);
        if (written(out_r, got_out, sizeof got_out) < 0 ||
            written(err_r, got_err, sizeof got_err) < 0)
            status = -4;
        close(out_r);
        close(err_r);
        if (holder > 0) {
            kill(holder, SIGKILL);
            waitpid(holder, NULL, 0);
        }
        int ok = status == 0 && (at[1] == at[2]
            ? !strcmp(got_out, "out:pingerr:ping") && !strcmp(got_err, "")
            : !strcmp(got_out, "out:ping") && !strcmp(got_err, "err:ping"));
        CHECK(ok, cases[c].what);
        if (!ok)
            printf("#   status %d, stdout '%s', stderr '%s'\n", status, got_out, got_err);
    }
    for (int i = 0; i < 3; i++)
        close(saved[i]);
}

/* The child gets the caller's signal mask (not the all-blocked one used
 * during the spawn) and, with restore_signals, SIGPIPE back at SIG_DFL. */
static void test_signals(int force)
{
    char *argv[] = { "--signals", NULL };
    sigset_t usr2, old;
    struct rs_request r;
    struct rs_result res;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &usr2, &old);
    signal(SIGPIPE, SIG_IGN);
    request(&r, NULL, NULL);
    r.force_clone = force;
    CHECK(run_self(&r, &res, argv) == 1, "signals: caller's mask kept, SIGPIPE restored");
    r.restore_signals = 0;
    CHECK(run_self(&r, &res, argv) == 5, "signals: restore_signals=0 leaves SIGPIPE ignored");
    signal(SIGPIPE, SIG_DFL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The declarative setup (setup.c): every step shows in the child; a step
 * that fails comes back with its errno and step. */
static void test_setup(int force)
{
    char nice_arg[16];
    char *argv[] = { "--setup", nice_arg, NULL };
    unsigned long long cpu0 = 1;
    struct rlimit hard;
    /* Not RLIMIT_NOFILE: valgrind answers that one itself (its own fds sit
     * above the limit it shows); not RLIMIT_CORE: ASan's start-up in the
     * child sets that one to 0. */
    struct rs_rlimit limit = { RLIMIT_MSGQUEUE, 4096, 0 };
    struct rs_setup s;
    struct rs_request r;
    struct rs_result res;

    getrlimit(RLIMIT_MSGQUEUE, &hard);
    limit.hard = hard.rlim_max;
    snprintf(nice_arg, sizeof nice_arg, "%d", getpriority(PRIO_PROCESS, 0) + 3);
    memset(&s, 0, sizeof s);
    s.cgroup_fd = s.cgroup_procs_fd = s.ctty_fd = -1;
    s.rlimits = &limit;
    s.n_rlimits = 1;
    s.set_nice = 1;
    s.nice = 3;
    s.ignore_signals = 1ULL << (SIGUSR1 - 1);
    s.set_signal_mask = 1;
    s.signal_mask = 1ULL << (SIGUSR2 - 1);
    s.no_new_privs = 1;
    s.pdeathsig = SIGTERM;
    s.parent_pid = getpid();
    s.cpu_mask = &cpu0;
    s.cpu_mask_bytes = sizeof cpu0;
    request(&r, NULL, NULL);
    r.force_clone = force;
    r.setup = &s;
    int got = run_self(&r, &res, argv);
    CHECK(got == 127, "setup: every step shows in the child");
    if (got != 127)
        printf("#   got %#x\n", got);

    limit.soft = 8192;              /* soft above hard: EINVAL */
    limit.hard = 4096;
    request(&r, true_argv, (char *[]){ "/bin/true", NULL });
    r.force_clone = force;
    r.setup = &s;
    expect_fail(&r, EINVAL, RS_STEP_RLIMIT, "setup: a failed step comes back");
}

/* Threads that spawn at the same time, each on its own child stack, some
 * failing: every result must be the thread's own. */
#define N_THREADS 8
#define N_SPAWNS 12
static int thread_errors[2];    /* [0]: spawns meant to work, [1]: to fail */

static void *spawner(void *arg)
{
    long id = (long)arg;
    char *exe[] = { "/bin/true", NULL };
    for (int i = 0; i < N_SPAWNS; i++) {
        struct rs_request r;
        struct rs_result res;
        int fail = (id + i) % 3 == 0;
        request(&r, true_argv, exe);
        r.force_clone = (id + i) % 2;
        r.cwd = fail ? "/nonexistent" : NULL;
        int rc = rs_spawn(&r, &res);
        int good = fail ? rc == ENOENT && res.step == RS_STEP_CHDIR
                        : rc == 0 && wait_exit(res.pid) == 0;
        if (!good)
            __atomic_add_fetch(&thread_errors[fail], 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[N_THREADS];
    int started = 0;
    if (getenv("RS_HARNESS_NO_THREADS")) {
        printf("# threads: skipped (RS_HARNESS_NO_THREADS)\n");
        return;
    }
    for (long i = 0; i < N_THREADS; i++)
        started += pthread_create(&t[i], NULL, spawner, (void *)i) == 0;
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    CHECK(started == N_THREADS && thread_errors[0] == 0, "threads: concurrent spawns work");
    CHECK(thread_errors[1] == 0, "threads: concurrent failures each come back to their thread");
    if (thread_errors[0] || thread_errors[1])
        printf("#   wrong results: %d successes, %d failures\n", thread_errors[0], thread_errors[1]);
}

static void test_misc(void)
{
    CHECK(!strcmp(rs_step_name(RS_STEP_RLIMIT), "setrlimit") &&
          !strcmp(rs_step_name(RS_STEP_PDEATHSIG), "prctl") &&
          !strcmp(rs_step_name(RS_STEP_SETUP_SETSID), "setsid") &&
          !strcmp(rs_step_name(RS_STEP_SETUP_SETPGID), "setpgid"), "rs_step_name: setup steps");
    CHECK(!strcmp(rs_step_name(RS_STEP_CHDIR), "chdir") &&
          !strcmp(rs_step_name(-1), "unknown") && !strcmp(rs_step_name(99), "unknown"),
          "rs_step_name");
}

/* libibverbs may be missing (then "unavailable"); ibv_fork_init() is final. */
static void test_fork_init(void)
{
    static const char *states[] = { "unavailable", "disabled", "enabled", "unneeded", "unknown" };
    char lib[PATH_MAX], lib2[PATH_MAX];
    int err = -1;
    int st = rs_fork_status(lib, sizeof lib);
    CHECK(st >= RS_FORK_UNAVAILABLE && st <= RS_FORK_UNKNOWN, "rs_fork_status: a known state");
    CHECK((st == RS_FORK_UNAVAILABLE) == (lib[0] == '\0'), "rs_fork_status: path iff available");
    printf("# fork status: %s %s\n", states[st % 5], lib);
    int st2 = rs_fork_init(lib2, sizeof lib2, &err);
    printf("# fork init: %s err %d\n", states[st2 % 5], err);
    if (st == RS_FORK_UNAVAILABLE)
        CHECK(st2 == RS_FORK_UNAVAILABLE && err == 0, "rs_fork_init: unavailable stays so");
    else
        CHECK((st2 == RS_FORK_ENABLED || st2 == RS_FORK_UNNEEDED) && err == 0 &&
              !strcmp(lib, lib2), "rs_fork_init: enabled (or unneeded), same library");
    CHECK(rs_fork_status(lib, 8) == st2 && strlen(lib) <= 7, "rs_fork_status: short buffer");
}

int main(int argc, char **argv)
{
    char noexec[] = "/tmp/rs-harness-XXXXXX";
    if (argc > 1)
        return child_mode(argc, argv);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    int fd = mkstemp(noexec);    /* mode 0600: execve() says EACCES, even to root */
    if (fd >= 0)
        close(fd);
    setvbuf(stdout, NULL, _IOLBF, 0);
    probe();
    int fds = count_fds();
    start_forking();

    for (int force = 0; force <= 1; force++) {
        printf("# --- force_clone=%d\n", force);
        test_success(force);
        test_failures(force, noexec);
        test_pidfd(force);
        test_pass_fds(force);
        test_stdio(force);
        test_signals(force);
        test_setup(force);
    }
    test_threads();
    stop_forking();
#ifdef RS_MEASURE_STACK
    test_stack_depth();
    test_stack_reuse();
#endif
    test_pressure();
    test_misc();
    CHECK(count_fds() == fds, "no fd leaked by all of the above");
    test_fork_init();
    unlink(noexec);
    printf("%d passed, %d failed, %d todo\n", n_pass, n_fail, n_todo);
    return n_fail != 0;
}
