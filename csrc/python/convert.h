/* convert.c: a spawn request converted from Python values to
 * rs_spawn_packed()'s arguments (Python-only, like its users). */
#ifndef RDMASPAWN_CONVERT_H
#define RDMASPAWN_CONVERT_H

/* The objects and memory a usual spawn needs, held in the caller's frame: an
 * allocation and a free each, on every spawn, cost more than the rest of the
 * conversion. */
#define RS_CONV_OBJECTS 8
#define RS_CONV_SLOTS 256
#define RS_CONV_BLOCKS 8

struct rs_setup;

/* A request being converted: what it keeps alive, and rs_spawn_packed()'s
 * arguments. Set up with rs_conv_init(), given back with rs_conv_release(). */
struct rs_conv {
    PyObject *objects[RS_CONV_OBJECTS];  /* the first objects the strings live in */
    int n_objects;
    PyObject *more;             /* a list of the others, or NULL */
    void *blocks[RS_CONV_BLOCKS];   /* PyMem blocks where the slots ran out */
    int n_blocks;
    size_t used;                /* slots handed out, in pointers */
    char *slots[RS_CONV_SLOTS];
    /* rs_spawn_packed()'s arguments */
    char **argv, **exec_list, **envp;
    const char *cwd;
    int *keep_fds, n_keep_fds, *close_first, n_close_first;
    int stdin_fd, stdout_fd, stderr_fd, flags, close_method, umask, pgid;
    unsigned int *groups;
    int ngroups;
    long long gid, uid;
    int fail_status;
    const struct rs_setup *setup;
};

void rs_conv_init(struct rs_conv *c);
void rs_conv_release(struct rs_conv *c);

/* rs_spawn_packed() of c with the GIL released, then c given back. */
void rs_conv_spawn(struct rs_conv *c, struct rs_result *res);

/* c, where converted (else given back: NULL), handed to finish(c, ctx) at
 * once where then is NULL or None, else to then(spawn), a Python callable
 * that packs the declarative setup (rdmaspawn/_child/pack.py) and calls
 * spawn(address) once: finish(c, ctx) with the struct rs_setup at address.
 * So a bad argument is raised before the setup is packed, as CPython raises
 * it before its preexec_fn runs. c is given back either way. */
PyObject *rs_conv_then(struct rs_conv *c, int converted, PyObject *then,
                       PyObject *(*finish)(struct rs_conv *c, void *ctx), void *ctx);

/* A C parameter list written once as X(ID, name) pairs gives both an enum of
 * the IDs and its names, one string of them (rs_names_tuple()'s): these are the
 * two X's. */
#define RS_X_ENUM(id, name) id,
#define RS_X_NAME(id, name) #name " "

/* fork_exec's parameters, in its positional order on every version (a
 * version lacks some: its positions say -1). The names are ForkExecCall's
 * (rdmaspawn/dropin/cpython.py); tests/test_forkexec.py compares the two. */
#define RS_FORK_EXEC_PARAMS(X) \
    X(P_ARGS, args) X(P_EXECUTABLE_LIST, executable_list) X(P_CLOSE_FDS, close_fds) \
    X(P_FDS_TO_KEEP, fds_to_keep) X(P_CWD, cwd) X(P_ENV, env_list) \
    X(P_P2CREAD, p2cread) X(P_P2CWRITE, p2cwrite) X(P_C2PREAD, c2pread) \
    X(P_C2PWRITE, c2pwrite) X(P_ERRREAD, errread) X(P_ERRWRITE, errwrite) \
    X(P_ERRPIPE_READ, errpipe_read) X(P_ERRPIPE_WRITE, errpipe_write) \
    X(P_RESTORE_SIGNALS, restore_signals) X(P_CALL_SETSID, call_setsid) \
    X(P_PGID_TO_SET, pgid_to_set) X(P_GID, gid) X(P_EXTRA_GROUPS, extra_groups) \
    X(P_UID, uid) X(P_CHILD_UMASK, child_umask) X(P_PREEXEC_FN, preexec_fn) \
    X(P_ALLOW_VFORK, allow_vfork)

enum rs_fork_exec_param { RS_FORK_EXEC_PARAMS(RS_X_ENUM) RS_N_PARAMS };

/* How this CPython's fork_exec words its errors, from dropin/cpython.py
 * (Internals.fork_exec_wording): a tuple of str. */
enum rs_wording {
    W_WRONG_COUNT,      /* str.format() with wanted, given */
    W_TOO_MANY_GROUPS,
    W_GROUP_TYPE,       /* an extra group that is no int */
    W_NO_KEYWORDS,
    W_INT_RANGE,        /* a C int out of range ("": the next three) */
    W_LONG_RANGE,
    W_INT_GREATER,
    W_INT_LESS,
    W_FLOAT,            /* a float refused by name ("": PyNumber_Index's) */
    W_NO_INDEX,         /* str.format() with the type's name ("": PyNumber_Index's) */
    W_FLAGS_AS_INT,     /* "1": restore_signals and call_setsid are parsed as C ints */
    N_WORDING
};

/* str.format() of one of the wording's templates (with arg, or NULL, and the
 * keywords kwargs, or NULL) raised as exc: 0. */
int rs_raise_formatted(PyObject *exc, PyObject *template, PyObject *kwargs, PyObject *arg);

/* fork_exec's call (args, the positional arguments; pos[p]: where parameter
 * p sits) converted into c, with CPython's exceptions: 1, or 0 with one set.
 * The preexec_fn is not looked at (the caller's). errpipe_write gets that
 * fd; parent ends at first_memory_fd and up (an error pipe kept in memory)
 * are not closed in the child. */
int rs_convert_fork_exec(PyObject *args, const int *pos, PyObject *wording,
                         int first_memory_fd, struct rs_conv *c, int *errpipe_write);

#endif
