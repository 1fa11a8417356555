/*
 * The parent side of a spawn: stack, signals, clone, result.
 *
 * Every child shares the parent's memory (CLONE_VM) and the calling thread
 * sleeps until the child has exec'd or exited (CLONE_VFORK), so no page table
 * is copied and no MADV_DONTFORK page can go missing, unlike with fork().
 * This file never calls fork(), and the caller (cffi) has released the GIL.
 *
 * The modes, and when each is chosen:
 *
 *   how the child is made
 *     clone3() into cgroup   setup->cgroup_fd given: CLONE_INTO_CGROUP (Linux
 *                            5.7); refused, it falls to the next mode and the
 *                            child joins through cgroup.procs itself.
 *     clone3() + own entry   default: CLONE_CLEAR_SIGHAND lets the kernel reset
 *                            the handlers, and the entry needs no libc.
 *     glibc clone()          clone3() answered ENOSYS/EINVAL/EPERM once (Linux
 *                            < 5.5, seccomp, valgrind, qemu-user), or
 *                            force_clone, or rs_force_clone_fallback() (the
 *                            binding: RDMASPAWN_CLONE=clone); the child
 *                            resets handlers itself.
 *   how the child's verdict comes back (always both; no pipe, no probe)
 *     its rs_child.report    on every real kernel: CLONE_VM, so the parent
 *                            reads what the child wrote, and CLONE_VFORK, so
 *                            the child is done with it when clone returns.
 *     a MAP_SHARED slot      where CLONE_VM is emulated by a fork that still
 *                            waits like vfork (valgrind): a shared page stays
 *                            shared with a forked child (report.c). qemu-user
 *                            does not wait: its parent reads before the child
 *                            has written, so pre-exec errors are lost there
 *                            (as glibc's posix_spawn() loses them).
 *                            A pipe is never used: another thread's fork()
 *                            could inherit its write end, and the spawn would
 *                            then wait for that unrelated child (CPython's
 *                            error pipe has this flaw).
 *   the child's stack
 *     cached per thread      default: mmap'd once with a guard page below and
 *                            kept in thread-specific data (thread_stack());
 *                            an exiting thread's is kept for the next one.
 *     mapped per spawn       no pthread key could be made: unmapped after.
 *     the caller's stack     the mapping failed (RLIMIT_AS headroom, no free
 *                            vm.max_map_count slot): a frame on the calling
 *                            thread's own stack, as vfork() would use
 *                            (run_on_callers_stack()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* Under AddressSanitizer the child's frames poison parts of its stack and,
 * as it exec's instead of returning, never unpoison them: the parent does. */
#ifdef __SANITIZE_ADDRESS__
#  include <sanitizer/asan_interface.h>
#  define forget_child_frames(stack, size) ASAN_UNPOISON_MEMORY_REGION(stack, size)
#else
#  define forget_child_frames(stack, size) ((void)(stack), (void)(size))
#endif

#define RS_DEFINE_CLONE3_ENTRY
#include "arch.h"
#include "child.h"

#ifndef CLONE_PIDFD
#  define CLONE_PIDFD 0x00001000
#endif
#define RS_CLONE_CLEAR_SIGHAND 0x100000000ULL
#define RS_CLONE_INTO_CGROUP 0x200000000ULL

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

/* An enum rs_clone_path. Every thread may race to find out; they all reach
 * the same answer. */
static int clone_path;

void rs_force_clone_fallback(void)
{
    __atomic_store_n(&clone_path, RS_PATH_CLONE_FORCED, __ATOMIC_RELAXED);
}

int rs_clone_path(void)
{
    return __atomic_load_n(&clone_path, __ATOMIC_RELAXED);
}

static const char *const step_names[] = {
    [RS_STEP_NONE] = "none",
    [RS_STEP_CLONE] = "clone",
    [RS_STEP_KEEP_FDS] = "pass_fds",
    [RS_STEP_DUP] = "dup",
    [RS_STEP_DUP2] = "dup2",
    [RS_STEP_CHDIR] = "chdir",
    [RS_STEP_SIGNALS] = "sigprocmask",
    [RS_STEP_SETSID] = "setsid",
    [RS_STEP_SETPGID] = "setpgid",
    [RS_STEP_SETGROUPS] = "setgroups",
    [RS_STEP_SETGID] = "setregid",
    [RS_STEP_SETUID] = "setreuid",
    [RS_STEP_CLOSE_FDS] = "close_fds",
    [RS_STEP_EXEC] = "execve",
    [RS_STEP_PREPARE] = "malloc",
    [RS_STEP_SIGACTION] = "sigaction",
    [RS_STEP_SETUP_SETSID] = "setsid",
    [RS_STEP_SETUP_SETPGID] = "setpgid",
    [RS_STEP_CGROUP] = "cgroup",
    [RS_STEP_CTTY] = "ioctl",
    [RS_STEP_RLIMIT] = "setrlimit",
    [RS_STEP_NICE] = "nice",
    [RS_STEP_IOPRIO] = "ioprio_set",
    [RS_STEP_AFFINITY] = "sched_setaffinity",
    [RS_STEP_NO_NEW_PRIVS] = "prctl",
    [RS_STEP_PDEATHSIG] = "prctl",
};

const char *rs_step_name(int step)
{
    if (step < 0 || step >= (int)(sizeof step_names / sizeof *step_names))
        return "unknown";
    return step_names[step];
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
    if (!c->in_cgroup)
        return rs_clone3_entry(&args, RS_CLONE_ARGS_SIZE_VER0, rs_child_main, c);
    args.flags |= RS_CLONE_INTO_CGROUP;
    args.cgroup = (uint64_t)c->req->setup->cgroup_fd;
    return rs_clone3_entry(&args, sizeof args, rs_child_main, c);
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
    int state = __atomic_load_n(&clone_path, __ATOMIC_RELAXED);
    int try_clone3 = state <= RS_PATH_CLONE3 && !r->force_clone;
    if (try_clone3 && r->setup && r->setup->cgroup_fd >= 0) {
        /* Straight into the cgroup; on any failure (Linux < 5.7, or a cgroup
         * that refuses) the child joins through cgroup.procs instead, and
         * reports the error of that. */
        c->in_cgroup = 1;
        long pid = clone_with_clone3(c, stack, size, r->want_pidfd, pidfd);
        if (pid > 0) {
            *method = RS_CLONE_CLONE3;
            return pid;
        }
        c->in_cgroup = 0;
    }
    if (try_clone3) {
        long pid = clone_with_clone3(c, stack, size, r->want_pidfd, pidfd);
        if (pid != -ENOSYS && pid != -EINVAL && pid != -EPERM) {
            if (state == RS_PATH_UNTRIED && pid > 0)
                __atomic_compare_exchange_n(&clone_path, &state, RS_PATH_CLONE3, 0,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            *method = RS_CLONE_CLONE3;
            return pid;
        }
        /* No clone3(), or none with CLONE_CLEAR_SIGHAND (Linux < 5.5); a
         * compare-exchange, so that a forced fallback stays forced. */
        __atomic_compare_exchange_n(&clone_path, &state, RS_PATH_CLONE_REFUSED, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    *method = RS_CLONE_CLONE;
    return clone_with_glibc(c, stack, size, r->want_pidfd, pidfd);
}

/*
 * The guard page below a stack makes an overflow fault instead of scribbling
 * over whatever the parent mapped there. Reuse is safe: when clone returns in
 * the parent, the child has exec'd or exited. Keeping a thread's stack, and
 * an exited thread's for the next one, saves a spawn an mmap, an mprotect,
 * page faults and a munmap's TLB shootdown (docs/benchmark.md has the cost).
 * A spare slot is filled with a CAS and emptied with an exchange: no lock, so
 * a fork() at any moment leaves none held, and no slot goes to two threads.
 */
static pthread_key_t stack_key;
static pthread_once_t stack_once = PTHREAD_ONCE_INIT;
static size_t stack_total;
#define RS_SPARE_STACKS 16
static char *spare_stacks[RS_SPARE_STACKS];

/* The thread-specific data's destructor: the exiting thread's stack. */
static void free_stack(void *map)
{
    for (int i = 0; i < RS_SPARE_STACKS; i++) {
        char *empty = NULL;
        if (__atomic_compare_exchange_n(&spare_stacks[i], &empty, (char *)map, 0,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            return;
    }
    munmap(map, stack_total);
}

static void make_stack_key(void)
{
    stack_total = RS_CHILD_STACK_SIZE + (size_t)sysconf(_SC_PAGESIZE);
    if (pthread_key_create(&stack_key, free_stack) != 0)
        stack_total = 0;    /* no key: map a stack per spawn instead */
}

/* The lowest usable address of this thread's stack, or NULL if it cannot
 * be mapped (the guard page takes a mapping of its own: two slots). */
static char *thread_stack(int *owned)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *map;

    pthread_once(&stack_once, make_stack_key);
    *owned = 0;
    if (stack_total && (map = pthread_getspecific(stack_key)) != NULL)
        return map + page;
    for (int i = 0; stack_total && i < RS_SPARE_STACKS; i++) {
        if (!__atomic_load_n(&spare_stacks[i], __ATOMIC_RELAXED)
                || !(map = __atomic_exchange_n(&spare_stacks[i], NULL, __ATOMIC_ACQUIRE)))
            continue;
        if (pthread_setspecific(stack_key, map) == 0)
            return map + page;
        free_stack(map);
        break;
    }
    map = mmap(NULL, RS_CHILD_STACK_SIZE + page, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    if (mprotect(map + page, RS_CHILD_STACK_SIZE, PROT_READ | PROT_WRITE) != 0) {
        munmap(map, RS_CHILD_STACK_SIZE + page);
        return NULL;
    }
    if (!stack_total || pthread_setspecific(stack_key, map) != 0)
        *owned = 1;
    return map + page;
}

/*
 * A frame of the calling thread's own stack, as a vfork() child uses: chosen
 * over a static spare stack because it needs no lock (spawning threads do
 * not queue behind each other, and a fork() taken while a lock is held
 * cannot leave it locked in the forked child), no memory that could itself
 * run out, and it sits above the thread's own guard. The region is unused
 * until clone returns: this thread is suspended (CLONE_VFORK) with every
 * signal blocked. On the main thread the frame may have to grow the stack,
 * which a tight RLIMIT_AS can refuse, as it can refuse vfork()'s child.
 */
static __attribute__((noinline)) long run_on_callers_stack(struct rs_child *c,
                                                           int *pidfd, int *method)
{
    char stack[RS_CHILD_STACK_SIZE] __attribute__((aligned(16)));
    long pid = start_child(c, stack, sizeof stack, pidfd, method);
    forget_child_frames(stack, sizeof stack);
    return pid;
}

#ifdef RS_MEASURE_STACK
size_t rs_child_stack_used;
char *rs_child_stack_last;
#endif

static long run_on_mapped_stack(struct rs_child *c, char *stack, int *pidfd, int *method)
{
#ifdef RS_MEASURE_STACK
    size_t untouched = 0;
    memset(stack, 0xa5, RS_CHILD_STACK_SIZE);
#endif
    long pid = start_child(c, stack, RS_CHILD_STACK_SIZE, pidfd, method);
#ifdef RS_MEASURE_STACK
    while (untouched < RS_CHILD_STACK_SIZE && (unsigned char)stack[untouched] == 0xa5)
        untouched++;
    rs_child_stack_used = RS_CHILD_STACK_SIZE - untouched;
    rs_child_stack_last = stack;
#endif
    forget_child_frames(stack, RS_CHILD_STACK_SIZE);
    return pid;
}

int rs_spawn(const struct rs_request *req, struct rs_result *res)
{
    int saved_errno = errno;
    uint64_t all = ~(uint64_t)0;
    int pidfd = -1, owned;
    struct rs_child c = {
        .req = req,
        .envp = req->envp ? req->envp : environ,
        .shared = rs_take_report_slot(),
        .spawn_id = rs_new_spawn_id(),
    };

    *res = (struct rs_result){ .pid = -1, .pidfd = -1, .step = RS_STEP_NONE,
                               .clone_method = RS_CLONE_NONE };
    char *stack = thread_stack(&owned);

    /* Block everything, glibc's SIGCANCEL and SIGSETXID too (hence the raw
     * call: pthread_sigmask() refuses those), so that no handler runs in the
     * child before it has reset them; the child inherits this mask. */
    rs_sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&c.mask,
            sizeof(uint64_t));
    long pid = stack ? run_on_mapped_stack(&c, stack, &pidfd, &res->clone_method)
                     : run_on_callers_stack(&c, &pidfd, &res->clone_method);
    rs_sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&c.mask, 0,
            sizeof(uint64_t));
    if (owned)
        munmap(stack - sysconf(_SC_PAGESIZE), RS_CHILD_STACK_SIZE + sysconf(_SC_PAGESIZE));
    /* The child ran in a copy of our memory: only the shared slot has its
     * report. The id tells a report of this spawn from one that a child
     * which did not make its parent wait (qemu-user) wrote late, or that a
     * fork()ed copy of this process (sharing the page) wrote. */
    if (pid > 0 && !c.entered && c.shared && c.shared->spawn_id == c.spawn_id)
        c.report = *c.shared;
    rs_give_report_slot(c.shared);

    if (pid < 0) {
        res->err = (int)-pid;
        res->step = RS_STEP_CLONE;
        errno = saved_errno;
        return res->err;
    }
    res->pid = (int)pid;
    res->pidfd = pidfd;
    if (c.report.err) {
        res->err = c.report.err;
        res->step = c.report.step;
        res->exec_index = c.report.exec_index;
        if (pidfd >= 0) {
            close(pidfd);
            res->pidfd = -1;
        }
        if (req->reap_on_failure) {
            while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
    }
    errno = saved_errno;
    return res->err;
}
