/* rs_spawn_packed() (rdmaspawn.h): the flat arguments as struct rs_request. */
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
    struct rs_request r = {
        .argv = argv, .exec_list = exec_list, .envp = envp, .cwd = cwd,
        .keep_fds = keep_fds, .n_keep_fds = n_keep_fds,
        .close_first = close_first, .n_close_first = n_close_first,
        .stdin_fd = stdin_fd, .stdout_fd = stdout_fd, .stderr_fd = stderr_fd,
        .close_fds = !!(flags & RS_F_CLOSE_FDS),
        .restore_signals = !!(flags & RS_F_RESTORE_SIGNALS),
        .setsid = !!(flags & RS_F_SETSID),
        .want_pidfd = !!(flags & RS_F_WANT_PIDFD),
        .reap_on_failure = !!(flags & RS_F_REAP_ON_FAILURE),
        .force_clone = !!(flags & RS_F_FORCE_CLONE),
        .close_method = close_method,
        .umask = umask >= 0 ? umask : -1,
        .pgid = pgid >= 0 ? pgid : -1,
        .set_groups = ngroups >= 0, .groups = groups, .n_groups = ngroups,
        .set_gid = gid >= 0, .gid = (unsigned int)gid,
        .set_uid = uid >= 0, .uid = (unsigned int)uid,
        .fail_status = fail_status,
        .setup = setup,
    };
    return rs_spawn(&r, res);
}
