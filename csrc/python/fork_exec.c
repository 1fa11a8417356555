/*
 * rdmaspawn's fork_exec as a C callable: the hot path of rdmaspawn.Popen
 * and of subprocess under patch().
 *
 * CPython's _execute_child calls fork_exec on every spawn. This object does
 * what _posixsubprocess does: converts the call (convert.c, with
 * fork_exec's exceptions in its order) with the GIL held, releases the GIL
 * for the spawn only, and writes a failed child's error into CPython's
 * error pipe. A preexec_fn alone goes to Python, `slow(self, *args)`
 * (dropin/forkexec.py): CPython's own fork_exec where it needs a fork, else
 * its declarative setup packed and handed back here (rs_fork_exec_setup()).
 */
#include "binding.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rdmaspawn.h"
#include "convert.h"

typedef struct {
    PyObject_HEAD
    PyObject *wrapped;          /* __wrapped__: CPython's fork_exec, for a preexec_fn */
    PyObject *slow;             /* a call with a preexec_fn: slow(self, *args) */
    PyObject *wording;          /* this CPython's messages (convert.h's enum rs_wording) */
    PyObject *chdir_tag;        /* bytes after "OSError:<errno>:" for a failed chdir */
    PyObject *report;           /* report(fd, data): into an error pipe kept in memory */
    int first_memory_fd;        /* its ends are this number and up (dropin/errpipe.py) */
    Py_ssize_t nargs;           /* this CPython's argument count */
    int pos[RS_N_PARAMS];       /* index of each parameter in the call, -1: absent */
} ForkExec;

/* Tell CPython's _execute_child what failed in the child, as CPython's child
 * would: "OSError:<errno in hex>:<tag>" ("": execve, else chdir or noexec),
 * into its error pipe, or through report() where rdmaspawn.Popen keeps that
 * pipe in memory. A reader that has gone away (EPIPE) changes nothing: the
 * pid is returned. */
static void report_to_errpipe(ForkExec *self, int fd, const struct rs_result *res)
{
    char buf[64];
    const char *tag = res->step == RS_STEP_EXEC ? ""
                      : res->step == RS_STEP_CHDIR ? PyBytes_AsString(self->chdir_tag) : "noexec";
    int len = snprintf(buf, sizeof buf, "OSError:%x:%s", res->err, tag);
    if (len <= 0 || len >= (int)sizeof buf)
        return;
    if (fd >= self->first_memory_fd) {
        PyObject *where = PyLong_FromLong(fd);
        PyObject *data = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
        PyObject *done = where && data
            ? PyObject_CallFunctionObjArgs(self->report, where, data, NULL) : NULL;
        if (!done)
            PyErr_Clear();   /* as a write() that failed: the pid still goes back */
        Py_XDECREF(done);
        Py_XDECREF(data);
        Py_XDECREF(where);
    } else {
        int saved = errno;
        while (write(fd, buf, (size_t)len) < 0 && errno == EINTR)
            ;
        errno = saved;
    }
}

static PyObject *call_slow(ForkExec *self, PyObject *args)
{
    PyObject *head = PyTuple_Pack(1, (PyObject *)self);
    PyObject *full = head ? PySequence_Concat(head, args) : NULL;
    PyObject *result = full ? PyObject_Call(self->slow, full, NULL) : NULL;
    Py_XDECREF(full);
    Py_XDECREF(head);
    return result;
}

struct call { ForkExec *self; int errpipe_write; };

/* The converted call spawned: the pid. */
static PyObject *spawned(struct rs_conv *c, void *converted)
{
    struct call *call = converted;
    struct rs_result res;
    int flags = c->flags;

    rs_conv_spawn(c, &res);
    if (res.err == 0)
        return PyLong_FromLong(res.pid);
    if (res.pid < 0) {
        /* No child: CPython raises from its failed fork() itself. */
        errno = res.err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (res.step >= RS_STEP_SIGACTION)  /* the setup's: a ChildSetupError, made by pack.py */
        return rs_raise_spawn_error(&res, flags, Py_None, Py_None);
    /* The child failed before exec: the caller reads the pipe and reaps it,
     * as with CPython. */
    report_to_errpipe(call->self, call->errpipe_write, &res);
    return PyLong_FromLong(res.pid);
}

/* The call converted and spawned, with no setup (then NULL) or with the
 * one then() packs (rs_conv_then()): the pid. */
static PyObject *spawn(ForkExec *self, PyObject *args, PyObject *then)
{
    struct rs_conv c;
    struct call call = {self, -1};

    rs_conv_init(&c);
    return rs_conv_then(&c, rs_convert_fork_exec(args, self->pos, self->wording,
                                                 self->first_memory_fd, &c, &call.errpipe_write),
                        then, spawned, &call);
}

/* The number of arguments, as fork_exec counts them first. */
static int counted(ForkExec *self, PyObject *args, PyObject *kwargs)
{
    if (kwargs && PyDict_Size(kwargs))
        return rs_refuse(PyExc_TypeError, "%U", PyTuple_GetItem(self->wording, W_NO_KEYWORDS));
    if (PyTuple_Size(args) == self->nargs)
        return 1;
    PyObject *named = Py_BuildValue("{s:n,s:n}", "wanted", self->nargs,
                                    "given", PyTuple_Size(args));
    if (named)
        rs_raise_formatted(PyExc_TypeError, PyTuple_GetItem(self->wording, W_WRONG_COUNT),
                           named, NULL);
    Py_XDECREF(named);
    return 0;
}

static PyObject *fork_exec_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    ForkExec *self = (ForkExec *)op;

    if (!counted(self, args, kwargs))
        return NULL;
    if (PyTuple_GetItem(args, self->pos[P_PREEXEC_FN]) != Py_None)
        return call_slow(self, args);
    return spawn(self, args, NULL);
}

PyObject *rs_fork_exec_setup(PyObject *module, PyObject *call)
{
    PyObject *op, *args, *then;
    (void)module;
    if (!PyArg_UnpackTuple(call, "fork_exec_setup", 3, 3, &op, &args, &then))
        return NULL;
    if (!rs_is_fork_exec(op) || !PyTuple_Check(args))
        return rs_fail(PyExc_TypeError, "fork_exec_setup: not a fork_exec and its call");
    return counted((ForkExec *)op, args, NULL) ? spawn((ForkExec *)op, args, then) : NULL;
}

/* --- the type ------------------------------------------------------------ */

static int fork_exec_traverse(PyObject *op, visitproc visit, void *arg)
{
    ForkExec *self = (ForkExec *)op;
    Py_VISIT(self->wrapped);
    Py_VISIT(self->slow);
    Py_VISIT(self->wording);
    Py_VISIT(self->report);
    Py_VISIT(Py_TYPE(op));  /* a heap type */
    return 0;
}

static int fork_exec_clear(PyObject *op)
{
    ForkExec *self = (ForkExec *)op;
    Py_CLEAR(self->wrapped);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->wording);
    Py_CLEAR(self->chdir_tag);
    Py_CLEAR(self->report);
    return 0;
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
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot fork_exec_slots[] = {
    {Py_tp_call, (void *)fork_exec_call},
    {Py_tp_traverse, (void *)fork_exec_traverse},
    {Py_tp_clear, (void *)fork_exec_clear},
    {Py_tp_dealloc, (void *)rs_gc_dealloc},
    {Py_tp_getset, fork_exec_getset},
    {Py_tp_doc, (void *)"fork_exec(*args): _posixsubprocess.fork_exec's arguments; "
                        "the child is started by rdmaspawn's engine."},
    {0, NULL},
};

static PyType_Spec fork_exec_spec = {
    "rdmaspawn.fork_exec", sizeof(ForkExec), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, fork_exec_slots,
};

PyObject *rs_fork_exec_params(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return rs_names_tuple(RS_FORK_EXEC_PARAMS(RS_X_NAME));
}

static PyObject *type;  /* made once; the GIL serialises the callers */

int rs_is_fork_exec(PyObject *obj)
{
    return type && (PyObject *)Py_TYPE(obj) == type;
}

PyObject *rs_fork_exec_new(PyObject *module, PyObject *args)
{
    PyObject *wrapped, *slow, *positions, *wording, *chdir_tag, *report;
    int first_memory_fd;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO!O!O!Oi:fork_exec_new", &wrapped, &slow, &PyTuple_Type,
                          &positions, &PyTuple_Type, &wording, &PyBytes_Type, &chdir_tag,
                          &report, &first_memory_fd))
        return NULL;
    if (PyTuple_Size(positions) != RS_N_PARAMS || PyTuple_Size(wording) != N_WORDING)
        return rs_fail(PyExc_TypeError, "rs_fork_exec_new: bad arguments");
    /* "Starts children with the engine": rdmaspawn.guard() lets it be. */
    if (!type && (!(type = PyType_FromSpec(&fork_exec_spec))
                  || PyObject_SetAttrString(type, "__rdmaspawn__", Py_True) < 0)) {
        Py_CLEAR(type);
        return NULL;
    }
    ForkExec *self = (ForkExec *)PyType_GenericAlloc((PyTypeObject *)type, 0);
    if (!self)
        return NULL;
    PyObject *refs[] = {wrapped, slow, wording, chdir_tag, report};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        Py_INCREF(refs[i]);
    self->wrapped = wrapped;
    self->slow = slow;
    self->wording = wording;
    self->chdir_tag = chdir_tag;
    self->report = report;
    self->first_memory_fd = first_memory_fd;
    for (int i = 0; i < RS_N_PARAMS; i++) {
        long p = PyLong_AsLong(PyTuple_GetItem(positions, i));
        if (p == -1 && PyErr_Occurred()) {
            Py_DECREF(self);
            return NULL;
        }
        self->pos[i] = (int)p;
        if (p + 1 > self->nargs)
            self->nargs = p + 1;
    }
    return (PyObject *)self;
}
