/*
 * The child side of a spawn.
 *
 * The child runs in the parent's address space (CLONE_VM) on a stack of its
 * own, while the thread that spawned it is suspended (CLONE_VFORK). Rules:
 *  - Raw system calls only (the arch/ headers). No malloc, no stdio, no Python, and no
 *    glibc wrappers: they write errno, and errno lives in the parent thread's
 *    TLS, which the child shares. glibc's setuid()/setgid()/setgroups() are
 *    worse: to keep POSIX per-process credentials they signal every thread on
 *    the process's thread list (SIGSETXID), which here is the parent's.
 *  - Write nothing the parent owns except c->entered and the report
 *    (c->report, c->shared).
 *  - Signals arrive blocked (the parent blocked all of them, glibc's internal
 *    ones too). Handled signals go back to SIG_DFL before the parent's mask is
 *    restored, so no handler of the parent ever runs on this stack. The
 *    kernel did that already when clone3() took CLONE_CLEAR_SIGHAND.
 * The order of the steps follows CPython's _posixsubprocess child_exec(), so
 * that the same request fails at the same step with the same errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>

#include "arch.h"
#include "child.h"
#include "setup.h"
#include "sigdisp.h"

#define RS_NSIG 65              /* kernel signals are 1..64 */

static int fail_exec(struct rs_child *c, int step, long rc, int exec_index)
{
    c->report.err = (int)-rc;
    c->report.step = step;
    c->report.exec_index = exec_index;
    c->report.spawn_id = c->spawn_id;
    if (c->shared)
        *c->shared = c->report;
    return c->req->fail_status;
}

static int fail(struct rs_child *c, int step, long rc)
{
    return fail_exec(c, step, rc, 0);
}

static void reset_handled_signals(void)
{
    for (int sig = 1; sig < RS_NSIG; sig++) {
        struct rs_ksigaction old;
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        if (rs_sys4(SYS_rt_sigaction, sig, 0, (long)&old, sizeof(uint64_t)) < 0)
            continue;
        if (old.handler != SIG_DFL && old.handler != SIG_IGN)
            rs_set_disposition(sig, SIG_DFL);
    }
}

static long clear_cloexec(int fd)
{
    long flags = rs_sys2(SYS_fcntl, fd, F_GETFD);
    if (flags < 0)
        return flags;
    if (!(flags & FD_CLOEXEC))
        return 0;
    return rs_sys3(SYS_fcntl, fd, F_SETFD, flags & ~FD_CLOEXEC);
}

/* Make fd become target; a fd that is already there only loses CLOEXEC.
 * -1 means "inherit"; any other negative fd fails in dup3() with EBADF, as
 * it fails in CPython's child. */
static long install(int fd, int target)
{
    if (fd == -1)
        return 0;
    if (fd == target)
        return clear_cloexec(fd);
    return rs_sys3(SYS_dup3, fd, target, 0);
}

static int is_kept(const struct rs_request *r, int fd)
{
    for (int i = 0; i < r->n_keep_fds; i++) {
        if (r->keep_fds[i] == fd)
            return 1;
        if (r->keep_fds[i] > fd)
            return 0;
    }
    return 0;
}

/* close_range() over the gaps between the kept fds. */
static long close_by_range(const struct rs_request *r)
{
    unsigned int lo = 3;
    for (int i = 0; i < r->n_keep_fds; i++) {
        int k = r->keep_fds[i];
        if (k < (int)lo)
            continue;
        if ((unsigned int)k > lo) {
            long rc = rs_sys3(SYS_close_range, lo, k - 1, 0);
            if (rc < 0)
                return rc;
        }
        lo = (unsigned int)k + 1;
    }
    return rs_sys3(SYS_close_range, lo, ~0U, 0);
}

struct rs_dirent64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* Where close_range() is missing (Linux < 5.9): walk our own fd table. */
static long close_by_proc(const struct rs_request *r)
{
    char buf[2048] __attribute__((aligned(8)));
    long dir = rs_sys4(SYS_openat, AT_FDCWD, (long)"/proc/self/fd",
                       O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dir < 0)
        return dir;
    for (;;) {
        long n = rs_sys3(SYS_getdents64, dir, (long)buf, sizeof buf);
        if (n <= 0) {
            rs_sys1(SYS_close, dir);
            return n;
        }
        for (long off = 0; off < n;) {
            struct rs_dirent64 *d = (struct rs_dirent64 *)(buf + off);
            int fd = 0, digits = 0;
            off += d->reclen;
            for (const char *p = d->name; *p >= '0' && *p <= '9'; p++, digits++)
                fd = fd * 10 + (*p - '0');
            if (digits == 0 || fd < 3 || fd == dir || is_kept(r, fd))
                continue;
            rs_sys1(SYS_close, fd);
        }
    }
}

/* Last resort (no /proc): every fd below the bound, given or RLIMIT_NOFILE. */
static void close_by_loop(const struct rs_request *r)
{
    long max_fd = r->max_fd;
    if (max_fd <= 0) {
        uint64_t rl[2];     /* soft, hard */
        max_fd = 1 << 20;
        if (rs_sys4(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, (long)rl) == 0 &&
            rl[0] < (uint64_t)max_fd)
            max_fd = (long)rl[0];
    }
    for (int fd = 3; fd < max_fd; fd++)
        if (!is_kept(r, fd))
            rs_sys1(SYS_close, fd);
}

static void close_inherited(const struct rs_request *r)
{
    switch (r->close_method) {
    case RS_CLOSE_AUTO:
        if (close_by_range(r) == 0)
            return;
        /* the kernel lacks close_range() */
        __attribute__((fallthrough));
    case RS_CLOSE_PROC:
        if (close_by_proc(r) == 0)
            return;
        /* no /proc */
        __attribute__((fallthrough));
    default:
        close_by_loop(r);
    }
}

int rs_child_main(void *arg)
{
    struct rs_child *c = arg;
    const struct rs_request *r = c->req;
    long rc;

    c->entered = 1;
    if (!c->handlers_cleared)
        reset_handled_signals();
    /* Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored
     * across execve(), so put them back unless asked not to. */
    if (r->restore_signals) {
        rs_set_disposition(SIGPIPE, SIG_DFL);
        rs_set_disposition(SIGXFSZ, SIG_DFL);
    }
    const struct rs_setup *setup = r->setup;
    int step;
    if (setup && (rc = rs_setup_signals(setup, &step)) < 0)
        return fail(c, step, rc);
    long mask = setup && setup->set_signal_mask ? (long)&setup->signal_mask : (long)&c->mask;
    rc = rs_sys4(SYS_rt_sigprocmask, SIG_SETMASK, mask, 0, sizeof(uint64_t));
    if (rc < 0)
        return fail(c, RS_STEP_SIGNALS, rc);

    for (int i = 0; i < r->n_keep_fds; i++) {
        rc = clear_cloexec(r->keep_fds[i]);
        if (rc < 0)
            return fail(c, RS_STEP_KEEP_FDS, rc);
    }
    for (int i = 0; i < r->n_close_first; i++)
        rs_sys1(SYS_close, r->close_first[i]);

    /* stdout must not be 0 and stderr not 0 or 1 when the lower ones are
     * installed, or installing those would clobber them first. */
    int in = r->stdin_fd, out = r->stdout_fd, errfd = r->stderr_fd;
    if (out == 0) {
        rc = rs_sys3(SYS_fcntl, out, F_DUPFD_CLOEXEC, 3);
        if (rc < 0)
            return fail(c, RS_STEP_DUP, rc);
        out = (int)rc;
    }
    if (errfd == 0 || errfd == 1) {
        rc = rs_sys3(SYS_fcntl, errfd, F_DUPFD_CLOEXEC, 3);
        if (rc < 0)
            return fail(c, RS_STEP_DUP, rc);
        errfd = (int)rc;
    }
    if ((rc = install(in, 0)) < 0 || (rc = install(out, 1)) < 0 ||
        (rc = install(errfd, 2)) < 0)
        return fail(c, RS_STEP_DUP2, rc);

    if (r->cwd && (rc = rs_sys1(SYS_chdir, (long)r->cwd)) < 0)
        return fail(c, RS_STEP_CHDIR, rc);
    if (r->umask >= 0)
        rs_sys1(SYS_umask, r->umask);
    if (r->setsid && (rc = rs_sys1(SYS_setsid, 0)) < 0)
        return fail(c, RS_STEP_SETSID, rc);
    if (r->pgid >= 0 && (rc = rs_sys2(SYS_setpgid, 0, r->pgid)) < 0)
        return fail(c, RS_STEP_SETPGID, rc);
    if (setup && !setup->early_after_ids &&
        (rc = rs_setup_early(setup, c->in_cgroup, &step)) < 0)
        return fail(c, step, rc);
    if (r->set_groups &&
        (rc = rs_sys2(SYS_setgroups, r->n_groups, (long)r->groups)) < 0)
        return fail(c, RS_STEP_SETGROUPS, rc);
    /* CPython's calls, so that the same request is refused for the same
     * reason: setregid(gid, gid) and setreuid(uid, uid) may only move the
     * real id to the current real or effective one (unless privileged),
     * where setres*id() would also accept the saved id. */
    if (r->set_gid &&
        (rc = rs_sys2(SYS_setregid, r->gid, r->gid)) < 0)
        return fail(c, RS_STEP_SETGID, rc);
    if (r->set_uid &&
        (rc = rs_sys2(SYS_setreuid, r->uid, r->uid)) < 0)
        return fail(c, RS_STEP_SETUID, rc);
    if (setup && setup->early_after_ids &&
        (rc = rs_setup_early(setup, c->in_cgroup, &step)) < 0)
        return fail(c, step, rc);
    if (setup && (rc = rs_setup_late(setup, &step)) < 0)
        return fail(c, step, rc);

    if (r->close_fds)
        close_inherited(r);

    /* Like CPython: report the first error that is not "not here", so that
     * a PATH entry that denies access is not hidden by later misses. */
    long first = 0;
    int i, first_index = 0;
    rc = -ENOENT;
    for (i = 0; r->exec_list[i]; i++) {
        rc = rs_sys3(SYS_execve, (long)r->exec_list[i], (long)r->argv,
                     (long)c->envp);
        if (rc != -ENOENT && rc != -ENOTDIR && first == 0) {
            first = rc;
            first_index = i;
        }
    }
    if (first)
        return fail_exec(c, RS_STEP_EXEC, first, first_index);
    return fail_exec(c, RS_STEP_EXEC, rc, i > 0 ? i - 1 : 0);
}
