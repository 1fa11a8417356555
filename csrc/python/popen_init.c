/*
 * The body of rdmaspawn.Popen.__init__: CPython's __init__ with SIGINT held
 * back around it (dropin/interrupts.py says why, sigint.c how), without
 * the Python frames (hold(), finish(), replay(), a super() object) that
 * cost each Popen more than the hold itself.
 *
 * __init__ itself is a Python function that dropin/popen.py makes from
 * CPython's own (its parameters and defaults, then rdmaspawn's setup
 * keywords), so that it answers introspection (inspect, typing, pickle,
 * mock.create_autospec) as a function does. Its one statement calls this
 * object with self and every parameter's value, positionally, in that
 * order: `layout` says where each part sits.
 *
 * The plain call, an instance of rdmaspawn.Popen itself (a subclass's may
 * have classes between the two in its MRO, which super() finds) with every
 * setup keyword at its default, goes straight to CPython's __init__. Any
 * other is turned by `prepare(self, *values)` (Python) into the call to
 * make, (init, args, kwargs), made under the same hold.
 */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
#  define Py_LIMITED_API 0x03090000   /* see fork_exec.c */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <signal.h>

#include "binding.h"

typedef struct {
    PyObject_HEAD
    PyObject *base;      /* subprocess.Popen: its __init__, read at each call
                          * (as super() would: a wrapper put on it later is
                          * called too) */
    PyObject *prepare;   /* (self, *values) -> (init, args, kwargs): every
                          * call that is not plain */
    PyObject *popen;     /* rdmaspawn.Popen: the class whose instances come here */
    PyObject *name;      /* "__init__" */
    Py_ssize_t npositional;    /* CPython's positional parameters, self included */
    PyObject *kwonly_names;    /* CPython's keyword-only parameters, a tuple */
    PyObject *kwonly_defaults; /* and each one's default (passed on only when
                                * the value is another object) */
    PyObject *setup_defaults;  /* each setup keyword's default: a call that
                                * gives one another value is not plain */
    PyObject *getsignal;       /* _signal.getsignal */
    PyObject *raise_signal;    /* _signal.raise_signal */
    PyObject *discard;         /* "_discard": self._discard() undoes a Popen never returned */
    PyObject *sigint;          /* SIGINT, as an int */
} Init;

/* --- the hold ---------------------------------------------------------------- */

/* Whether SIGINT's handler is one from Python (only those can raise); -1
 * with an exception. */
static int sigint_handler_is_python(Init *m, PyObject **handler)
{
    PyObject *h = PyObject_CallFunctionObjArgs(m->getsignal, m->sigint, NULL);
    if (!h)
        return -1;
    int is = PyCallable_Check(h);
    if (handler && is)
        *handler = h;
    else
        Py_DECREF(h);
    return is;
}

/* signal.raise_signal(SIGINT), and the Python handler run now: 3.9 and
 * 3.10's raise_signal() leaves that to the next bytecode. */
static int raise_sigint(Init *m)
{
    PyObject *r = PyObject_CallFunctionObjArgs(m->raise_signal, m->sigint, NULL);
    if (!r)
        return -1;
    Py_DECREF(r);
    return PyErr_CheckSignals();
}

/* The end of a Popen that was built, under the hold: the program's handler
 * runs once for what arrived (interrupts.replay()), with the frame of the
 * code that called Popen(); then the release, which raises SIGINT again for
 * what came after. 0, or -1 with an exception. */
static int finish(Init *m)
{
    if (rs_sigint_take()) {
        PyObject *handler;
        int is = sigint_handler_is_python(m, &handler);
        if (is < 0)
            return -1;
        if (is) {
            /* The frame of the code that called Popen(): the one below
             * __init__'s, the Python function whose body this is. */
            PyObject *init_frame = (PyObject *)PyEval_GetFrame();  /* borrowed */
            PyObject *frame = init_frame ? PyObject_GetAttrString(init_frame, "f_back") : NULL;
            if (!frame && init_frame) {
                Py_DECREF(handler);
                return -1;
            }
            PyObject *r = PyObject_CallFunctionObjArgs(handler, m->sigint,
                                                       frame ? frame : Py_None, NULL);
            Py_XDECREF(frame);
            Py_DECREF(handler);
            if (!r)
                return -1;
            Py_DECREF(r);
        }
    }
    if (rs_sigint_release() && raise_sigint(m) < 0)
        return -1;
    /* A signal that Python's handler recorded meanwhile (this one included,
     * before 3.11) runs its handler here, not after Popen() has returned,
     * where the caller would lose the Popen: as at the Python __init__'s
     * last bytecodes. */
    return PyErr_CheckSignals();
}

/* The caller never gets this Popen: its child is killed and reaped, its
 * pipes closed (Popen._discard), still under the hold, then the hold ends.
 * The exception set on entry goes on; one raised here goes instead, with
 * that one as its __context__, as an exception raised in an except block. */
static PyObject *abandon(Init *m, PyObject *self, int owner)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = PyObject_CallMethodObjArgs(self, m->discard, NULL);
    int ok = r != NULL;
    Py_XDECREF(r);
    if (owner && rs_sigint_release() && ok)
        ok = raise_sigint(m) == 0;
    if (ok) {
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    PyObject *ntype, *nvalue, *ntb;
    PyErr_Fetch(&ntype, &nvalue, &ntb);
    PyErr_NormalizeException(&ntype, &nvalue, &ntb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb)
        PyException_SetTraceback(value, tb);
    PyException_SetContext(nvalue, value);  /* steals value */
    Py_DECREF(type);
    Py_XDECREF(tb);
    PyErr_Restore(ntype, nvalue, ntb);
    return NULL;
}

/* init(*args, **kwargs) under the hold, for self. */
static PyObject *held_call(Init *m, PyObject *self, PyObject *init,
                           PyObject *args, PyObject *kwargs)
{
    int owner = rs_sigint_owner();
    if (owner) {
        int is = sigint_handler_is_python(m, NULL);
        if (is < 0)
            return NULL;
        if (is)
            rs_sigint_hold();
    }
    PyObject *r = PyObject_Call(init, args, kwargs);
    if (!r)
        return abandon(m, self, owner);
    Py_DECREF(r);
    if (owner && finish(m) < 0)
        return abandon(m, self, owner);
    return none();
}

/* Whether the call is plain: rdmaspawn.Popen's own instance, each setup
 * keyword at its default. */
static int is_plain(Init *m, PyObject *values, Py_ssize_t n)
{
    if ((PyObject *)Py_TYPE(PyTuple_GetItem(values, 0)) != m->popen)
        return 0;
    Py_ssize_t nsetup = PyTuple_Size(m->setup_defaults);
    for (Py_ssize_t i = 0; i < nsetup; i++)
        if (PyTuple_GetItem(values, n - nsetup + i) != PyTuple_GetItem(m->setup_defaults, i))
            return 0;
    return 1;
}

/* The plain call: CPython's __init__ with its positional parameters
 * positionally and each keyword-only one not at its default by name. */
static PyObject *plain_call(Init *m, PyObject *values)
{
    PyObject *kwargs = NULL, *r = NULL;
    PyObject *args = PyTuple_GetSlice(values, 0, m->npositional);
    PyObject *init = args ? PyObject_GetAttr(m->base, m->name) : NULL;
    if (!init)
        goto out;
    Py_ssize_t nkw = PyTuple_Size(m->kwonly_names);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *value = PyTuple_GetItem(values, m->npositional + i);
        if (value == PyTuple_GetItem(m->kwonly_defaults, i))
            continue;
        if ((!kwargs && !(kwargs = PyDict_New()))
                || PyDict_SetItem(kwargs, PyTuple_GetItem(m->kwonly_names, i), value) < 0)
            goto out;
    }
    r = held_call(m, PyTuple_GetItem(values, 0), init, args, kwargs);
out:
    Py_XDECREF(init);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return r;
}

/* --- the call ---------------------------------------------------------------- */

static PyObject *init_call(PyObject *op, PyObject *values, PyObject *kwargs)
{
    Init *m = (Init *)op;
    Py_ssize_t n = PyTuple_Size(values);
    if (kwargs || n != m->npositional + PyTuple_Size(m->kwonly_names)
                          + PyTuple_Size(m->setup_defaults)) {
        PyErr_SetString(PyExc_TypeError, "Popen.__init__'s body takes each parameter's value, "
                                         "positionally");
        return NULL;
    }
    if (is_plain(m, values, n))
        return plain_call(m, values);
    PyObject *call = PyObject_Call(m->prepare, values, NULL);
    if (!call)
        return NULL;
    PyObject *init, *args, *kw, *r = NULL;
    if (PyArg_ParseTuple(call, "OO!O!:prepare", &init, &PyTuple_Type, &args,
                         &PyDict_Type, &kw))
        r = held_call(m, PyTuple_GetItem(values, 0), init, args, kw);
    Py_DECREF(call);
    return r;
}

/* --- the type ---------------------------------------------------------------- */

#define METHOD_REFS(X) \
    X(base) X(prepare) X(popen) X(name) X(kwonly_names) X(kwonly_defaults) \
    X(setup_defaults) X(getsignal) X(raise_signal) X(discard) X(sigint)

static int init_traverse(PyObject *op, visitproc visit, void *arg)
{
    Init *m = (Init *)op;
#define VISIT(f) Py_VISIT(m->f);
    METHOD_REFS(VISIT)
#undef VISIT
    Py_VISIT(Py_TYPE(op));
    return 0;
}

static int init_clear(PyObject *op)
{
    Init *m = (Init *)op;
#define CLEAR(f) Py_CLEAR(m->f);
    METHOD_REFS(CLEAR)
#undef CLEAR
    return 0;
}

static void init_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    init_clear(op);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(op);
    Py_DECREF(type);
}

static PyType_Slot init_slots[] = {
    {Py_tp_call, (void *)init_call},
    {Py_tp_traverse, (void *)init_traverse},
    {Py_tp_clear, (void *)init_clear},
    {Py_tp_dealloc, (void *)init_dealloc},
    {Py_tp_doc, (void *)"rdmaspawn.Popen.__init__'s body: (self, *values), each "
                        "parameter's value in the function's order."},
    {0, NULL},
};

static PyType_Spec init_spec = {
    "rdmaspawn.Popen_init", sizeof(Init), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, init_slots,
};

PyObject *rs_popen_init_new(PyObject *module, PyObject *args)
{
    static PyObject *type;  /* made once; the GIL serialises the callers */
    Py_ssize_t npositional;
    PyObject *base, *popen, *prepare, *layout, *getsignal, *raise_signal;
    PyObject *kwonly_names, *kwonly_defaults, *setup_defaults;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOOOOO:popen_init_new", &base, &popen, &prepare,
                          &layout, &getsignal, &raise_signal))
        return NULL;
    if (!PyType_Check(base) || !PyType_Check(popen) || !PyCallable_Check(prepare)
            || !PyTuple_Check(layout)
            || !PyArg_ParseTuple(layout, "nO!O!O!:layout", &npositional,
                                 &PyTuple_Type, &kwonly_names, &PyTuple_Type,
                                 &kwonly_defaults, &PyTuple_Type, &setup_defaults)
            || npositional < 1 || PyTuple_Size(kwonly_names) != PyTuple_Size(kwonly_defaults)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "popen_init_new: bad arguments");
        return NULL;
    }
    if (!type && !(type = PyType_FromSpec(&init_spec)))
        return NULL;
    Init *m = (Init *)PyType_GenericAlloc((PyTypeObject *)type, 0);
    if (!m)
        return NULL;
    PyObject *refs[] = {base, popen, prepare, kwonly_names, kwonly_defaults, setup_defaults,
                        getsignal, raise_signal};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        Py_INCREF(refs[i]);
    m->base = base;
    m->popen = popen;
    m->prepare = prepare;
    m->npositional = npositional;
    m->kwonly_names = kwonly_names;
    m->kwonly_defaults = kwonly_defaults;
    m->setup_defaults = setup_defaults;
    m->getsignal = getsignal;
    m->raise_signal = raise_signal;
    m->name = PyUnicode_InternFromString("__init__");
    m->discard = PyUnicode_InternFromString("_discard");
    m->sigint = PyLong_FromLong(SIGINT);
    if (!m->name || !m->discard || !m->sigint) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}
