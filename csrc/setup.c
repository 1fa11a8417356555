/*
 * The child's declarative setup: what launchers use preexec_fn for, done
 * with raw system calls in the CLONE_VM child (the rules of child.c apply:
 * no libc wrappers, no errno, nothing written that the parent owns).
 *
 * child.c calls these at three points (and execs with the setup's signal
 * mask); the order is the one that is right for privileges:
 *   1. rs_setup_signals(), with the handlers reset and before the mask is
 *      restored: ignore_signals -> SIG_IGN, default_signals -> SIG_DFL.
 *   2. rs_setup_early(), after the request's setsid/setpgid and before the
 *      ids change, so that a limit or a priority a dropped user may not set
 *      still can be: the setup's own session and group (after the request's,
 *      as CPython calls preexec_fn after start_new_session and process_group,
 *      so that os.setsid is refused where it is refused there), cgroup
 *      (where clone3 did not place the child), controlling tty,
 *      rlimits, nice, ioprio, CPU affinity. With early_after_ids (a
 *      preexec_fn's steps) right after the ids change instead, where CPython
 *      calls preexec_fn, so that the same value is refused the same way.
 *   3. rs_setup_late(), after the ids change: no_new_privs, then the death
 *      signal, last, because the kernel clears it on a credential change
 *      (prctl(2), PR_SET_PDEATHSIG). If the parent died before the prctl,
 *      the child was reparented and nobody will send the signal: getppid()
 *      no longer names the parent, and the child takes the signal itself.
 * Each returns 0 or a negative errno with *step set.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "arch.h"
#include "setup.h"
#include "sigdisp.h"

#define IOPRIO_WHO_PROCESS 1

long rs_setup_signals(const struct rs_setup *s, int *step)
{
    *step = RS_STEP_SIGACTION;
    for (int sig = 1; sig <= 64; sig++) {
        uint64_t bit = (uint64_t)1 << (sig - 1);
        long rc = 0;
        if (s->ignore_signals & bit)
            rc = rs_set_disposition(sig, SIG_IGN);
        else if (s->default_signals & bit)
            rc = rs_set_disposition(sig, SIG_DFL);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* "0" in cgroup.procs moves the writer: no pid to format. */
static long join_cgroup(int procs_fd)
{
    long rc = rs_sys3(SYS_write, procs_fd, (long)"0", 1);
    return rc < 0 ? rc : 0;
}

/* nice(2): relative to the current value; getpriority returns 20 - nice. */
static long add_nice(int increment)
{
    long rc = rs_sys2(SYS_getpriority, PRIO_PROCESS, 0);
    if (rc < 0)
        return rc;
    rc = rs_sys3(SYS_setpriority, PRIO_PROCESS, 0, (20 - rc) + increment);
    /* glibc's nice() says EPERM where the kernel says EACCES; os.nice too. */
    return rc == -EACCES ? -EPERM : rc;
}

long rs_setup_early(const struct rs_setup *s, int in_cgroup, int *step)
{
    long rc;

    /* "new" does nothing where the child leads its session already. */
    if (s->session != RS_SESSION_KEEP && !(s->session == RS_SESSION_NEW
                                           && rs_sys1(SYS_getsid, 0) == rs_sys1(SYS_getpid, 0))) {
        *step = RS_STEP_SETUP_SETSID;
        if ((rc = rs_sys1(SYS_setsid, 0)) < 0)
            return rc;
    }
    if (s->set_pgid) {
        *step = RS_STEP_SETUP_SETPGID;
        if ((rc = rs_sys2(SYS_setpgid, 0, s->pgid)) < 0)
            return rc;
    }
    if (s->cgroup_procs_fd >= 0 && !in_cgroup) {
        *step = RS_STEP_CGROUP;
        if ((rc = join_cgroup(s->cgroup_procs_fd)) < 0)
            return rc;
    }
    /* Opened as the user the child is now, as CPython's preexec_fn would:
     * the parent's open file would carry the parent's permission (Linux
     * 5.16+ checks the opener's credentials for cgroup.procs). */
    if (s->cgroup_procs_path) {
        *step = RS_STEP_CGROUP;
        long fd = rs_sys4(SYS_openat, AT_FDCWD, (long)s->cgroup_procs_path,
                          O_WRONLY | O_CLOEXEC, 0);
        if (fd < 0)
            return fd;
        rc = join_cgroup((int)fd);
        rs_sys1(SYS_close, fd);
        if (rc < 0)
            return rc;
    }
    if (s->ctty_fd >= 0) {
        *step = RS_STEP_CTTY;
        if ((rc = rs_sys3(SYS_ioctl, s->ctty_fd, TIOCSCTTY, 0)) < 0)
            return rc;
    }
    *step = RS_STEP_RLIMIT;
    for (int i = 0; i < s->n_rlimits; i++) {
        uint64_t lim[2] = { s->rlimits[i].soft, s->rlimits[i].hard };
        if ((rc = rs_sys4(SYS_prlimit64, 0, s->rlimits[i].resource,
                          (long)lim, 0)) < 0)
            return rc;
    }
    if (s->set_nice) {
        *step = RS_STEP_NICE;
        if ((rc = add_nice(s->nice)) < 0)
            return rc;
    }
    if (s->set_ioprio) {
        *step = RS_STEP_IOPRIO;
        if ((rc = rs_sys3(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, s->ioprio)) < 0)
            return rc;
    }
    if (s->cpu_mask) {
        *step = RS_STEP_AFFINITY;
        if ((rc = rs_sys3(SYS_sched_setaffinity, 0, s->cpu_mask_bytes,
                          (long)s->cpu_mask)) < 0)
            return rc;
    }
    return 0;
}

long rs_setup_late(const struct rs_setup *s, int *step)
{
    long rc;

    if (s->no_new_privs) {
        *step = RS_STEP_NO_NEW_PRIVS;
        if ((rc = rs_sys5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0)
            return rc;
    }
    if (s->pdeathsig) {
        *step = RS_STEP_PDEATHSIG;
        if ((rc = rs_sys2(SYS_prctl, PR_SET_PDEATHSIG, s->pdeathsig)) < 0)
            return rc;
        if (rs_sys1(SYS_getppid, 0) != s->parent_pid)
            rs_sys2(SYS_kill, rs_sys1(SYS_getpid, 0), s->pdeathsig);
    }
    return 0;
}
