/*
 * rdmaspawn: the C core's public interface.
 *
 * The block between the cdef markers is read verbatim by build_ffi.py as the
 * cffi cdef, so it holds plain declarations only: no preprocessor lines, no
 * system types (cffi's parser does not see the system headers).
 */
#ifndef RDMASPAWN_H
#define RDMASPAWN_H

#include <stddef.h>

/* cdef-begin */

/* Which step of a spawn failed; the child reports it with the errno. */
enum rs_step {
    RS_STEP_NONE = 0,
    RS_STEP_CLONE = 1,      /* parent: clone3() / clone() */
    RS_STEP_KEEP_FDS = 2,   /* child: making pass_fds inheritable */
    RS_STEP_DUP = 3,        /* child: moving a low fd out of the way */
    RS_STEP_DUP2 = 4,       /* child: installing stdin/stdout/stderr */
    RS_STEP_CHDIR = 5,
    RS_STEP_SIGNALS = 6,
    RS_STEP_SETSID = 7,
    RS_STEP_SETPGID = 8,
    RS_STEP_SETGROUPS = 9,
    RS_STEP_SETGID = 10,
    RS_STEP_SETUID = 11,
    RS_STEP_CLOSE_FDS = 12,
    RS_STEP_EXEC = 13,
    RS_STEP_PREPARE = 14,   /* parent: memory for the request */
    /* The declarative setup (setup.c), in the order the child runs it. */
    RS_STEP_SIGACTION = 15,     /* ignore_signals / default_signals */
    RS_STEP_SETUP_SETSID = 16,  /* the setup's setsid (a preexec_fn's os.setsid) */
    RS_STEP_SETUP_SETPGID = 17, /* the setup's setpgid, after the request's */
    RS_STEP_CGROUP = 18,        /* writing itself into cgroup.procs */
    RS_STEP_CTTY = 19,          /* TIOCSCTTY */
    RS_STEP_RLIMIT = 20,        /* prlimit64 */
    RS_STEP_NICE = 21,          /* setpriority */
    RS_STEP_IOPRIO = 22,        /* ioprio_set */
    RS_STEP_AFFINITY = 23,      /* sched_setaffinity */
    RS_STEP_NO_NEW_PRIVS = 24,  /* prctl(PR_SET_NO_NEW_PRIVS) */
    RS_STEP_PDEATHSIG = 25      /* prctl(PR_SET_PDEATHSIG) */
};

/* struct rs_setup's session: what its setsid() is. */
enum rs_session {
    RS_SESSION_KEEP = 0,
    RS_SESSION_NEW = 1,         /* setsid() unless the child leads a session
                                   already (start_new_session=True did it):
                                   rdmaspawn.preexec.new_session(), a ctty */
    RS_SESSION_SETSID = 2       /* setsid() as os.setsid does it, refused where
                                   the child leads a session or a group */
};

/* How the child closes the fds it must not inherit (tests force each). */
enum rs_close_method {
    RS_CLOSE_AUTO = 0,      /* close_range(), else the /proc walk, else the loop */
    RS_CLOSE_PROC = 1,      /* getdents64() over /proc/self/fd */
    RS_CLOSE_LOOP = 2       /* close() every fd from 3 to max_fd */
};

/* How the child was created. */
enum rs_clone_method {
    RS_CLONE_NONE = 0,
    RS_CLONE_CLONE3 = 1,    /* clone3() with CLONE_CLEAR_SIGHAND, own entry */
    RS_CLONE_CLONE = 2      /* glibc clone(); the child resets handlers itself */
};

/* The exit status of a child that failed before exec, as CPython's child
 * gives it (_posixsubprocess.c: _exit(255)): rs_request.fail_status for
 * subprocess's children. */
enum rs_fail_status {
    RS_FAIL_STATUS_CPYTHON = 255
};

/* One resource limit for the child: prlimit64(0, resource, {soft, hard}). */
struct rs_rlimit {
    int resource;
    unsigned long long soft;
    unsigned long long hard;
};

/* The child's declarative setup (setup.c). Every field is optional. Signal
 * sets are bit masks, bit (sig - 1) for signal sig. */
struct rs_setup {
    int session;                /* enum rs_session */
    int set_pgid;
    int pgid;                   /* setpgid(0, pgid), after the request's own */
    int cgroup_fd;              /* -1, or a cgroup v2 directory: CLONE_INTO_CGROUP */
    int cgroup_procs_fd;        /* -1, or its cgroup.procs, open for writing:
                                   the child joins through it where clone3
                                   could not place it (Linux < 5.7) */
    const char *cgroup_procs_path;  /* NULL, or a cgroup.procs the child opens
                                   itself, as the new user (a preexec_fn's
                                   cgroup with the ids changing) */
    int ctty_fd;                /* -1, or a tty fd (child numbering) to make
                                   the controlling terminal; needs setsid */
    const struct rs_rlimit *rlimits;
    int n_rlimits;
    int set_nice;
    int nice;                   /* added to the current nice value, as nice(2) */
    int set_ioprio;
    int ioprio;                 /* ioprio_set(IOPRIO_WHO_PROCESS, 0, ioprio) */
    const unsigned long long *cpu_mask;     /* NULL, or sched_setaffinity's mask */
    int cpu_mask_bytes;
    int early_after_ids;        /* 1: cgroup, ctty, rlimits, nice, ioprio and
                                   affinity after the id change, where CPython
                                   calls a preexec_fn; 0: before it (the
                                   keywords' privilege-first order) */
    unsigned long long ignore_signals;      /* set to SIG_IGN */
    unsigned long long default_signals;     /* set to SIG_DFL */
    int set_signal_mask;
    unsigned long long signal_mask;         /* the mask the child execs with */
    int no_new_privs;
    int pdeathsig;              /* 0, or the signal to get when the parent dies */
    int parent_pid;             /* the spawning process, checked after pdeathsig */
};

/*
 * Everything the child needs, prepared in full by the parent. Pointers stay
 * valid for the whole call: the calling thread is suspended (CLONE_VFORK)
 * until the child has called execve() or exited.
 */
struct rs_request {
    char *const *argv;          /* NULL-terminated */
    char *const *envp;          /* NULL-terminated; NULL: environ itself (see below) */
    char *const *exec_list;     /* candidate executables, tried in order */
    const char *cwd;            /* NULL: stay */
    const int *keep_fds;        /* ascending; made inheritable, never closed */
    int n_keep_fds;
    const int *close_first;     /* parent's pipe ends: closed in the child first */
    int n_close_first;
    int stdin_fd;               /* becomes 0; -1: inherit */
    int stdout_fd;              /* becomes 1; -1: inherit */
    int stderr_fd;              /* becomes 2; -1: inherit */
    int close_fds;              /* close every fd > 2 not in keep_fds */
    int close_method;           /* enum rs_close_method */
    int max_fd;                 /* bound of the last-resort close loop */
    int umask;                  /* -1: leave */
    int restore_signals;        /* SIGPIPE and SIGXFSZ back to SIG_DFL */
    int setsid;
    int pgid;                   /* -1: leave; else setpgid(0, pgid) */
    int set_groups;
    const unsigned int *groups;
    int n_groups;
    int set_gid;
    unsigned int gid;
    int set_uid;
    unsigned int uid;
    int want_pidfd;             /* ask the kernel for a pidfd (O_CLOEXEC) */
    int reap_on_failure;        /* waitpid() a child that failed before exec */
    int fail_status;            /* exit status of a child that failed (CPython's: above) */
    int force_clone;            /* tests: skip clone3 and use the fallback */
    const struct rs_setup *setup;   /* NULL, or the declarative setup */
};

struct rs_result {
    int pid;                    /* -1 when no child was created */
    int pidfd;                  /* -1 unless asked for and given */
    int err;                    /* errno of the failure, 0 on success */
    int step;                   /* enum rs_step of the failure */
    int clone_method;           /* enum rs_clone_method */
    int exec_index;             /* RS_STEP_EXEC: the exec_list entry its errno is about */
};

/* rs_request.envp == NULL hands the child glibc's environ as it is: safe only
 * if no thread can setenv() or unsetenv() (which free the array) until
 * rs_spawn() returns. The Python binding passes a copy (python/environ.c). */
extern char **environ;

/* Start a child. Returns 0 on success, else the errno (also in res->err). */
int rs_spawn(const struct rs_request *req, struct rs_result *res);

/* How many times rs_spawn() has been called in this process: whatever path
 * a caller took into the engine, this counts it (tests check the routing). */
unsigned long rs_spawn_count(void);

/* Which way this process's spawns start their children (rs_clone_path()). */
enum rs_clone_path {
    RS_PATH_UNTRIED = 0,        /* no spawn yet: clone3() will be tried first */
    RS_PATH_CLONE3 = 1,         /* clone3() with CLONE_CLEAR_SIGHAND worked */
    RS_PATH_CLONE_REFUSED = 2,  /* glibc clone(): clone3() answered ENOSYS/EINVAL/EPERM */
    RS_PATH_CLONE_FORCED = 3    /* glibc clone(): rs_force_clone_fallback() was called */
};
int rs_clone_path(void);

/* Every later spawn of this process uses glibc clone(), as where clone3() is
 * refused (RDMASPAWN_CLONE=clone: tests and CI run the fallback). No way
 * back: spawning threads may already be on it. */
void rs_force_clone_fallback(void);

/* A short name for a step: "dup2", "chdir", "execve", ... */
const char *rs_step_name(int step);

/* Flags of rs_spawn_packed(). */
enum rs_flags {
    RS_F_CLOSE_FDS = 1,
    RS_F_RESTORE_SIGNALS = 2,
    RS_F_SETSID = 4,
    RS_F_WANT_PIDFD = 8,
    RS_F_REAP_ON_FAILURE = 16,
    RS_F_FORCE_CLONE = 32
};

/*
 * rs_spawn() with the request as flat arguments: the binding's one way in,
 * which csrc/python/convert.c calls with what it converted. The string
 * lists are NULL-terminated arrays; ngroups < 0 leaves the groups, gid/uid
 * < 0 leave the ids, umask and pgid < 0 leave those.
 */
int rs_spawn_packed(char *const *argv, char *const *exec_list, char *const *envp,
                    const char *cwd,
                    const int *keep_fds, int n_keep_fds,
                    const int *close_first, int n_close_first,
                    int stdin_fd, int stdout_fd, int stderr_fd,
                    int flags, int close_method, int umask, int pgid,
                    const unsigned int *groups, int ngroups,
                    long long gid, long long uid, int fail_status,
                    struct rs_result *res, const struct rs_setup *setup);

/* libibverbs fork support. */
enum rs_fork_state {
    RS_FORK_UNAVAILABLE = 0,    /* no libibverbs in this process or on the system */
    RS_FORK_DISABLED = 1,       /* ibv_fork_init() has not run: nothing marked */
    RS_FORK_ENABLED = 2,        /* registrations are marked MADV_DONTFORK */
    RS_FORK_UNNEEDED = 3,       /* the kernel copies pinned pages at fork and
                                   the library marks nothing */
    RS_FORK_UNKNOWN = 4         /* no ibv_is_fork_initialized (rdma-core < 35)
                                   and nothing shows it (forkinit.c) */
};

/* Both return an enum rs_fork_state and write the library's path into
 * libpath (empty when unavailable). rs_fork_init() also writes the errno of
 * a failed ibv_fork_init() into *err (EINVAL: memory was registered first). */
int rs_fork_status(char *libpath, int libpath_len);
int rs_fork_init(char *libpath, int libpath_len, int *err);

/* forkrepair.c: the fork repair (see there). Start it where the kernel said
 * it copies pinned pages at fork (the caller asks RDMA netlink): 0, or
 * -errno for a libibverbs that could not be rewritten (the others are). */
struct rs_repair_stats {
    int active;           /* rs_repair_start() ran in this process */
    long libraries;       /* libibverbs madvise slots rewritten */
    long rewritten;       /* libibverbs' MADV_DONTFORK calls made exact (inner pages only) */
    long unmarked;        /* marked mappings a child trips on, un-marked by the sweeps */
    long sweeps;          /* sweeps of /proc/self/smaps */
    long small;           /* registrations left unmarked: fewer inner bytes than mark_min */
    long bounded;         /* registrations left unmarked: mark_bound marks alive already */
    long mark_min;        /* the inner bytes from which a registration is marked */
    long mark_bound;      /* how many of the repair's marks may be alive at once */
};
int rs_repair_start(void);
void rs_repair_stats(struct rs_repair_stats *out);
/* 1 if [lo, hi) lies inside one mark the repair made itself (the inner
 * pages of a registration: nothing a fork() child needs), else 0. */
int rs_repair_exact(unsigned long lo, unsigned long hi);

/* unmark.c: 1 if a mapping of `path` (with VM_IO or VM_PFNMAP: io_or_pfnmap)
 * is memory the kernel or a driver mapped and marked for itself, 0 if it is
 * memory a program holds data in (unmark.c has the rule). */
int rs_driver_mapping(const char *path, int io_or_pfnmap);

/* marker.c: map a page of a memfd called `name` in place of the slot's
 * marker (NULL: none), for the doctor to see in /proc/PID/maps: 0 or -errno. */
enum { RS_MARKER_PATCH = 0, RS_MARKER_GUARD = 1, RS_MARKER_REPAIR = 2, RS_MARKER_SLOTS = 3 };
int rs_marker_set(int slot, const char *name);

/* cdef-end */

/* forkprobe.c: 1 if any mapping of this process other than device memory is
 * MADV_DONTFORK, 0 if none, -1 if /proc/self/smaps cannot be read. */
int rs_dontfork_anywhere(void);

#endif
