/*
 * rdmaspawn's fork_exec as a C callable: the hot path of rdmaspawn.Popen
 * and of subprocess under patch().
 *
 * CPython's _execute_child calls fork_exec with 21, 22 or 23 arguments on every
 * spawn. Checking and converting them in Python (dropin/forkexec.py) cost
 * the parent more CPU than CPython's whole C fork_exec, and with several
 * threads spawning that CPU is the throughput. This object does what
 * _posixsubprocess does for the plain call, the one _execute_child makes for
 * almost every Popen: converts the arguments in C with the GIL held, copies
 * the environ array while still holding it, releases the GIL for rs_spawn()
 * only, and writes a failed child's error into CPython's error pipe.
 *
 * Everything else (a preexec_fn, user/group/extra_groups, a value of an
 * unusual type or out of range, anything that would raise) goes unchanged to
 * the Python implementation, `slow(self, *args)`, which raises CPython's
 * exceptions in CPython's order. So this file decides only "is this the plain
 * case"; it never raises for a bad argument itself.
 *
 * It is not part of the engine: nothing in csrc/ itself includes Python.h (the
 * C harness links those files without Python); this directory does. Python
 * makes one through functions.c's fork_exec_new(). One file, in three parts
 * (the plain case, the call, the type), because all three read the object's
 * layout and its table of where each parameter sits; what each kind of
 * argument must be to count as plain is plain.c's.
 */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
/* The module is built for the limited API (one abi3 wheel for CPython
 * 3.9+): this file keeps to it too. Free-threaded builds have none. */
#  define Py_LIMITED_API 0x03090000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rdmaspawn.h"
#include "binding.h"
#include "plain.h"

/*
 * fork_exec's parameters, each as (enum name, Python name). One list makes
 * both the enum and the names rs_fork_exec_params() gives the binding, which
 * hands rs_fork_exec_new() where each name sits in this CPython's call: the
 * names are those of ForkExecCall (rdmaspawn/dropin/cpython.py), and
 * tests/test_forkexec.py compares the two.
 */
#define FORK_EXEC_PARAMS(X) \
    X(P_ARGS, args) X(P_EXECUTABLE_LIST, executable_list) X(P_CLOSE_FDS, close_fds) \
    X(P_FDS_TO_KEEP, fds_to_keep) X(P_CWD, cwd) X(P_ENV, env_list) \
    X(P_P2CREAD, p2cread) X(P_P2CWRITE, p2cwrite) X(P_C2PREAD, c2pread) \
    X(P_C2PWRITE, c2pwrite) X(P_ERRREAD, errread) X(P_ERRWRITE, errwrite) \
    X(P_ERRPIPE_READ, errpipe_read) X(P_ERRPIPE_WRITE, errpipe_write) \
    X(P_RESTORE_SIGNALS, restore_signals) X(P_CALL_SETSID, call_setsid) \
    X(P_PGID_TO_SET, pgid_to_set) X(P_GID, gid) X(P_EXTRA_GROUPS, extra_groups) \
    X(P_UID, uid) X(P_CHILD_UMASK, child_umask) X(P_PREEXEC_FN, preexec_fn) \
    X(P_ALLOW_VFORK, allow_vfork)

enum param { FORK_EXEC_PARAMS(RS_X_ENUM) N_PARAMS };
static const char *const param_names[N_PARAMS] = { FORK_EXEC_PARAMS(RS_X_NAME) };

typedef struct {
    PyObject_HEAD
    PyObject *wrapped;          /* __wrapped__: CPython's fork_exec, for a preexec_fn */
    PyObject *slow;             /* the Python implementation: slow(self, *args) */
    PyObject *chdir_tag;        /* bytes after "OSError:<errno>:" for a failed chdir */
    PyObject *report;           /* report(fd, data): into an error pipe kept in memory */
    int first_memory_fd;        /* its ends are this number and up (dropin/errpipe.py) */
    Py_ssize_t nargs;           /* this CPython's argument count */
    int pos[N_PARAMS];          /* index of each parameter in the call, -1: absent */
} ForkExec;

/* --- the plain case ------------------------------------------------------ */

static PyObject *given(ForkExec *self, PyObject *args, enum param p)
{
    return self->pos[p] < 0 ? NULL : PyTuple_GetItem(args, self->pos[p]);
}

/*
 * Fill the request from a plain call: 1, or 0 where anything is not plain
 * (with no exception set: the Python implementation sees the call afresh).
 */
static int convert_plain(ForkExec *self, PyObject *args, struct rs_request *r,
                         int *close_first, int *errpipe_write, struct rs_held *h)
{
    PyObject *argv = given(self, args, P_ARGS);
    PyObject *exec_list = given(self, args, P_EXECUTABLE_LIST);
    PyObject *keep = given(self, args, P_FDS_TO_KEEP);
    PyObject *cwd = given(self, args, P_CWD);
    PyObject *env = given(self, args, P_ENV);
    PyObject *pgid = given(self, args, P_PGID_TO_SET);
    int fds[8], close_fds, restore, setsid, umask, pgid_value = -1;
    static const enum param fd_params[8] = {
        P_P2CREAD, P_P2CWRITE, P_C2PREAD, P_C2PWRITE,
        P_ERRREAD, P_ERRWRITE, P_ERRPIPE_READ, P_ERRPIPE_WRITE,
    };

    /* What only the Python implementation does. */
    if (given(self, args, P_PREEXEC_FN) != Py_None || given(self, args, P_GID) != Py_None
            || given(self, args, P_UID) != Py_None || given(self, args, P_EXTRA_GROUPS) != Py_None)
        return 0;
    for (int i = 0; i < 8; i++)
        if (!rs_plain_int(given(self, args, fd_params[i]), &fds[i]))
            return 0;
    if (!rs_plain_flag(given(self, args, P_CLOSE_FDS), &close_fds)
            || !rs_plain_flag(given(self, args, P_RESTORE_SIGNALS), &restore)
            || !rs_plain_flag(given(self, args, P_CALL_SETSID), &setsid)
            || !rs_plain_int(given(self, args, P_CHILD_UMASK), &umask)
            || (pgid && !rs_plain_int(pgid, &pgid_value)))
        return 0;
    if (close_fds && fds[7] < 3)
        return 0;   /* fork_exec's ValueError */

    Py_ssize_t argc = rs_plain_length(argv), nexec = rs_plain_length(exec_list);
    Py_ssize_t nenv = env == Py_None ? 0 : rs_plain_length(env);
    Py_ssize_t nkeep = Py_TYPE(keep) == &PyTuple_Type ? PyTuple_Size(keep) : -1;
    if (argc < 0 || nexec < 0 || nenv < 0 || nkeep < 0)
        return 0;
    if (env == Py_None)
        nenv = rs_environ_count();

    /* One block: the argv, exec_list and envp pointer arrays, and the kept fds. */
    size_t slots = (size_t)argc + 1 + (size_t)nexec + 1 + (size_t)nenv + 1;
    char **ptrs = rs_held_block(h, slots * sizeof(char *) + (size_t)nkeep * sizeof(int));
    if (!ptrs)
        return 0;
    int *keep_fds = (int *)(ptrs + slots);
    char **envp = ptrs + argc + 1 + nexec + 1;
    /* The environ array is copied straight after it was counted (environ.c):
     * the strings' conversion below allocates objects, and a GC pass it
     * starts could run a finalizer that changes the environment. */
    if (env == Py_None)
        rs_environ_snapshot(envp, (int)nenv);

    int n_keep = 0, prev = -1;
    for (Py_ssize_t i = 0; i < nkeep; i++) {
        int fd;
        if (!rs_plain_int(PyTuple_GetItem(keep, i), &fd) || fd <= prev)
            return 0;   /* fork_exec's "bad value(s) in fds_to_keep" */
        prev = fd;
        /* The error pipe stays with the parent: the child reports through
         * shared memory, and the parent writes the pipe (see below). */
        if (fd != fds[7])
            keep_fds[n_keep++] = fd;
    }
    if (!rs_plain_command(argv, argc, exec_list, nexec, env, nenv, cwd, ptrs, r, h))
        return 0;
    r->keep_fds = keep_fds;
    r->n_keep_fds = n_keep;
    int n_close = 0;
    const int parent_ends[4] = {fds[1], fds[2], fds[4], fds[6]};
    for (int i = 0; i < 4; i++)   /* an error pipe in memory has no fd to close */
        if (parent_ends[i] != -1 && parent_ends[i] < self->first_memory_fd)
            close_first[n_close++] = parent_ends[i];
    r->close_first = close_first;
    r->n_close_first = n_close;
    r->stdin_fd = fds[0];
    r->stdout_fd = fds[3];
    r->stderr_fd = fds[5];
    r->close_fds = close_fds;
    r->close_method = RS_CLOSE_AUTO;
    r->restore_signals = restore;
    r->setsid = setsid;
    r->umask = umask >= 0 ? umask : -1;
    r->pgid = pgid_value >= 0 ? pgid_value : -1;
    r->fail_status = RS_FAIL_STATUS_CPYTHON;
    *errpipe_write = fds[7];
    return 1;
}

/* Tell CPython's _execute_child what failed in the child, as CPython's child
 * would: "OSError:<errno in hex>:<tag>" ("": execve, else chdir or noexec),
 * into its error pipe, or through report() where rdmaspawn.Popen keeps that
 * pipe in memory. A reader that has gone away (EPIPE) changes nothing: the
 * pid is returned. */
static void report_to_errpipe(ForkExec *self, int fd, const struct rs_result *res)
{
    char buf[64];
    const char *tag = "noexec";
    if (res->step == RS_STEP_EXEC)
        tag = "";
    else if (res->step == RS_STEP_CHDIR)
        tag = PyBytes_AsString(self->chdir_tag);
    int len = snprintf(buf, sizeof buf, "OSError:%x:%s", res->err, tag ? tag : "noexec");
    if (len > 0 && len < (int)sizeof buf && fd >= self->first_memory_fd) {
        PyObject *where = PyLong_FromLong(fd);
        PyObject *data = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
        PyObject *done = where && data
            ? PyObject_CallFunctionObjArgs(self->report, where, data, NULL) : NULL;
        if (!done)
            PyErr_Clear();   /* as a write() that failed: the pid still goes back */
        Py_XDECREF(done);
        Py_XDECREF(data);
        Py_XDECREF(where);
    } else if (len > 0 && len < (int)sizeof buf) {
        int saved = errno;
        while (write(fd, buf, (size_t)len) < 0 && errno == EINTR)
            ;
        errno = saved;
    }
}

static PyObject *call_slow(ForkExec *self, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t n = PyTuple_Size(args);
    PyObject *full = PyTuple_New(n + 1);
    if (!full)
        return NULL;
    Py_INCREF(self);
    PyTuple_SetItem(full, 0, (PyObject *)self);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(args, i);
        Py_INCREF(item);
        PyTuple_SetItem(full, i + 1, item);
    }
    PyObject *result = PyObject_Call(self->slow, full, kwargs);
    Py_DECREF(full);
    return result;
}

static PyObject *fork_exec_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    ForkExec *self = (ForkExec *)op;
    struct rs_request r;
    struct rs_result res;
    struct rs_held h;
    int close_first[4], errpipe_write = -1;

    rs_held_init(&h);
    memset(&r, 0, sizeof r);
    if ((kwargs && PyDict_Size(kwargs)) || PyTuple_Size(args) != self->nargs
            || !convert_plain(self, args, &r, close_first, &errpipe_write, &h)) {
        PyErr_Clear();  /* a failed conversion: the Python code meets it again */
        rs_held_release(&h);
        return call_slow(self, args, kwargs);
    }

    rs_spawn_held(&r, &res, &h);
    if (res.err == 0)
        return PyLong_FromLong(res.pid);
    if (res.pid < 0) {
        /* No child: CPython raises from its failed fork() itself. */
        errno = res.err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* The child failed before exec: the caller reads the pipe and reaps it,
     * as with CPython. */
    report_to_errpipe(self, errpipe_write, &res);
    return PyLong_FromLong(res.pid);
}

/* --- the type ------------------------------------------------------------ */

static int fork_exec_traverse(PyObject *op, visitproc visit, void *arg)
{
    ForkExec *self = (ForkExec *)op;
    Py_VISIT(self->wrapped);
    Py_VISIT(self->slow);
    Py_VISIT(self->report);
    Py_VISIT(Py_TYPE(op));  /* a heap type */
    return 0;
}

static int fork_exec_clear(PyObject *op)
{
    ForkExec *self = (ForkExec *)op;
    Py_CLEAR(self->wrapped);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->chdir_tag);
    Py_CLEAR(self->report);
    return 0;
}

static void fork_exec_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    fork_exec_clear(op);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(op);
    Py_DECREF(type);
}

static PyObject *fork_exec_rdmaspawn(PyObject *op, void *closure)
{
    (void)op;
    (void)closure;
    Py_INCREF(Py_True);
    return Py_True;
}

/* __wrapped__ is read at each preexec_fn call, so that a wrapper applied
 * later can be taken out of the chain again (rdmaspawn.dropin.wrapping). A getset,
 * not a member: structmember.h is deprecated since 3.12. */
static PyObject *fork_exec_get_wrapped(PyObject *op, void *closure)
{
    ForkExec *self = (ForkExec *)op;
    (void)closure;
    Py_INCREF(self->wrapped);
    return self->wrapped;
}

static int fork_exec_set_wrapped(PyObject *op, PyObject *value, void *closure)
{
    ForkExec *self = (ForkExec *)op;
    (void)closure;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "__wrapped__ cannot be deleted");
        return -1;
    }
    PyObject *old = self->wrapped;
    Py_INCREF(value);
    self->wrapped = value;
    Py_XDECREF(old);
    return 0;
}

static PyGetSetDef fork_exec_getset[] = {
    {"__wrapped__", fork_exec_get_wrapped, fork_exec_set_wrapped, NULL, NULL},
    /* "Starts children with the engine": rdmaspawn.guard() lets it be. */
    {"__rdmaspawn__", fork_exec_rdmaspawn, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot fork_exec_slots[] = {
    {Py_tp_call, (void *)fork_exec_call},
    {Py_tp_traverse, (void *)fork_exec_traverse},
    {Py_tp_clear, (void *)fork_exec_clear},
    {Py_tp_dealloc, (void *)fork_exec_dealloc},
    {Py_tp_getset, fork_exec_getset},
    {Py_tp_doc, (void *)"fork_exec(*args): _posixsubprocess.fork_exec's arguments; "
                        "the child is started by rdmaspawn's engine."},
    {0, NULL},
};

static PyType_Spec fork_exec_spec = {
    "rdmaspawn.fork_exec", sizeof(ForkExec), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, fork_exec_slots,
};

PyObject *rs_fork_exec_params(void)
{
    return rs_names_tuple(param_names, N_PARAMS);
}

static PyObject *type;  /* made once; the GIL serialises the callers */

int rs_is_fork_exec(PyObject *obj)
{
    return type && (PyObject *)Py_TYPE(obj) == type;
}

PyObject *rs_fork_exec_new(PyObject *wrapped, PyObject *slow, PyObject *positions,
                           PyObject *chdir_tag, PyObject *report, int first_memory_fd)
{
    Py_ssize_t nargs = 0;

    if (!PyTuple_Check(positions) || PyTuple_Size(positions) != N_PARAMS
            || !PyBytes_Check(chdir_tag) || !PyCallable_Check(slow)
            || !PyCallable_Check(report) || first_memory_fd < 3) {
        PyErr_SetString(PyExc_TypeError, "rs_fork_exec_new: bad arguments");
        return NULL;
    }
    if (!type && !(type = PyType_FromSpec(&fork_exec_spec)))
        return NULL;
    ForkExec *self = (ForkExec *)PyType_GenericAlloc((PyTypeObject *)type, 0);
    if (!self)
        return NULL;
    for (int i = 0; i < N_PARAMS; i++) {
        long p = PyLong_AsLong(PyTuple_GetItem(positions, i));
        if (p == -1 && PyErr_Occurred()) {
            Py_DECREF(self);
            return NULL;
        }
        self->pos[i] = (int)p;
        if (p + 1 > nargs)
            nargs = p + 1;
    }
    self->nargs = nargs;
    Py_INCREF(wrapped);
    self->wrapped = wrapped;
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(chdir_tag);
    self->chdir_tag = chdir_tag;
    Py_INCREF(report);
    self->report = report;
    self->first_memory_fd = first_memory_fd;
    return (PyObject *)self;
}
