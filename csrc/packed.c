/*
 * rs_spawn_packed(): the binding's way in, called by csrc/python/convert.c
 * once it has converted a request: the flat arguments as struct rs_request,
 * then rs_spawn().
 */
#include <string.h>

#include "rdmaspawn.h"

int rs_spawn_packed(char *const *argv, char *const *exec_list, char *const *envp,
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

    memset(&r, 0, sizeof r);
    r.argv = argv;
    r.exec_list = exec_list;
    r.envp = envp;
    r.cwd = cwd;
    r.keep_fds = keep_fds;
    r.n_keep_fds = n_keep_fds;
    r.close_first = close_first;
    r.n_close_first = n_close_first;
    r.stdin_fd = stdin_fd;
    r.stdout_fd = stdout_fd;
    r.stderr_fd = stderr_fd;
    r.close_fds = !!(flags & RS_F_CLOSE_FDS);
    r.restore_signals = !!(flags & RS_F_RESTORE_SIGNALS);
    r.setsid = !!(flags & RS_F_SETSID);
    r.want_pidfd = !!(flags & RS_F_WANT_PIDFD);
    r.reap_on_failure = !!(flags & RS_F_REAP_ON_FAILURE);
    r.force_clone = !!(flags & RS_F_FORCE_CLONE);
    r.close_method = close_method;
    r.umask = umask >= 0 ? umask : -1;
    r.pgid = pgid >= 0 ? pgid : -1;
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
    return rs_spawn(&r, res);
}
