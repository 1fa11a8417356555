/*
 * rs_spawn_packed(): the Python binding's way in.
 *
 * Building struct rs_request from Python costs a cffi attribute store per
 * field and a call per string array: on the hot path, most of the binding's
 * overhead. Here the parent (malloc is fine: this is not the child)
 * turns the flat arguments into the request and calls rs_spawn().
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmaspawn.h"

void rs_request_flags(struct rs_request *r, int flags)
{
    r->close_fds = !!(flags & RS_F_CLOSE_FDS);
    r->restore_signals = !!(flags & RS_F_RESTORE_SIGNALS);
    r->setsid = !!(flags & RS_F_SETSID);
    r->want_pidfd = !!(flags & RS_F_WANT_PIDFD);
    r->reap_on_failure = !!(flags & RS_F_REAP_ON_FAILURE);
    r->force_clone = !!(flags & RS_F_FORCE_CLONE);
}

int rs_spawn_packed(const char *argv_blob, int argc,
                    const char *exec_blob, int nexec,
                    const char *env_blob, int nenv, char *const *envp,
                    const char *cwd,
                    const int *keep_fds, int n_keep_fds,
                    const int *close_first, int n_close_first,
                    int stdin_fd, int stdout_fd, int stderr_fd,
                    int flags, int close_method, int umask, int pgid,
                    const unsigned int *groups, int ngroups,
                    long long gid, long long uid, int fail_status,
                    struct rs_result *res, const struct rs_setup *setup)
{
    struct rs_request r;
    size_t slots = (size_t)argc + 1 + (size_t)nexec + 1 + (nenv >= 0 ? (size_t)nenv + 1 : 0);
    char **ptrs = malloc(slots * sizeof *ptrs);

    if (!ptrs) {
        memset(res, 0, sizeof *res);
        res->pid = res->pidfd = -1;
        res->err = ENOMEM;
        res->step = RS_STEP_PREPARE;
        return ENOMEM;
    }
    memset(&r, 0, sizeof r);
    rs_split_blob(argv_blob, argc, ptrs);
    r.argv = ptrs;
    rs_split_blob(exec_blob, nexec, ptrs + argc + 1);
    r.exec_list = ptrs + argc + 1;
    if (nenv >= 0) {
        rs_split_blob(env_blob, nenv, ptrs + argc + 1 + nexec + 1);
        r.envp = ptrs + argc + 1 + nexec + 1;
    } else {
        r.envp = envp;
    }
    r.cwd = cwd;
    r.keep_fds = keep_fds;
    r.n_keep_fds = n_keep_fds;
    r.close_first = close_first;
    r.n_close_first = n_close_first;
    r.stdin_fd = stdin_fd;
    r.stdout_fd = stdout_fd;
    r.stderr_fd = stderr_fd;
    rs_request_flags(&r, flags);
    r.close_method = close_method;
    r.umask = umask;
    r.pgid = pgid;
    if (ngroups >= 0) {
        r.set_groups = 1;
        r.groups = groups;
        r.n_groups = ngroups;
    }
    if (gid >= 0) {
        r.set_gid = 1;
        r.gid = (unsigned int)gid;
    }
    if (uid >= 0) {
        r.set_uid = 1;
        r.uid = (unsigned int)uid;
    }
    r.fail_status = fail_status;
    r.setup = setup;

    int rc = rs_spawn(&r, res);
    free(ptrs);
    return rc;
}
