/*
 * rdmaspawn.Popen.__init__ in C: CPython's __init__ with SIGINT held back
 * around it (dropin/interrupts.py says why, sigint.c how), without the
 * Python frames (this __init__, hold(), finish(), replay(), a super()
 * object) that cost each Popen more than the hold itself.
 *
 * It takes the plain call only: an instance of rdmaspawn.Popen itself (a
 * subclass's may have classes between the two in its MRO, which super()
 * finds) and no setup keyword. Any other goes to `slow`, the Python
 * __init__ (dropin/popen.py), which does the same in Python.
 *
 * It is called as CPython calls a Python function in a class: the type is a
 * method descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR), so Popen() passes the
 * instance as the first argument with no bound method made; attribute
 * access (super().__init__ in a subclass) gets a types.MethodType.
 * __wrapped__ is the Python __init__, and __signature__ its signature, so
 * inspect.signature() shows what it shows. __signature__ is not redundant:
 * inspect.unwrap() stops at it, and a bound method (attribute access on the
 * class, or on an instance) passes the lookup of __wrapped__ on to us, so
 * without it unwrapping the bound method yields the plain function, binding
 * lost. inspect.signature(rdmaspawn.Popen) does that where
 * _signature_get_user_defined_method unwraps what the descriptor returns
 * (gh-119605, in 3.13.5 but not 3.13.0): it showed (self, *args, **kwargs).
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
    PyObject *slow;      /* the Python __init__: every call that is not plain */
    PyObject *popen;     /* rdmaspawn.Popen: the class whose instances come here */
    PyObject *name;      /* "__init__" */
    PyObject *method_type;  /* types.MethodType, for attribute access */
    PyObject *setup_keywords;  /* a set: a call naming one is not plain */
    PyObject *getsignal;       /* _signal.getsignal */
    PyObject *raise_signal;    /* _signal.raise_signal */
    PyObject *discard;         /* "_discard": self._discard() undoes a Popen never returned */
    PyObject *sigint;          /* SIGINT, as an int */
} Init;

/* CPython's __init__, called with this call's arguments (self first). */
static PyObject *call_base(Init *m, PyObject *args, PyObject *kwargs)
{
    PyObject *base = PyObject_GetAttr(m->base, m->name);
    if (!base)
        return NULL;
    PyObject *r = PyObject_Call(base, args, kwargs);
    Py_DECREF(base);
    return r;
}

/* --- __init__ ---------------------------------------------------------------- */

static int names_setup_keyword(Init *m, PyObject *kwargs)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
        int found = PySet_Contains(m->setup_keywords, key);
        if (found)
            return found;  /* 1, or -1 with an exception */
    }
    return 0;
}

/* Whether SIGINT's handler is one from Python (only those can raise): as
 * interrupts.hold() asks before it holds. -1 with an exception. */
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
            PyObject *frame = (PyObject *)PyEval_GetFrame();  /* borrowed */
            PyObject *r = PyObject_CallFunctionObjArgs(handler, m->sigint,
                                                       frame ? frame : Py_None, NULL);
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

static PyObject *init_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    Init *m = (Init *)op;
    if (PyTuple_Size(args) < 1)
        return PyObject_Call(m->slow, args, kwargs);  /* its TypeError */
    if (kwargs) {
        int named = names_setup_keyword(m, kwargs);
        if (named < 0)
            return NULL;
        if (named)
            return PyObject_Call(m->slow, args, kwargs);
    }
    PyObject *self = PyTuple_GetItem(args, 0);
    if ((PyObject *)Py_TYPE(self) != m->popen)
        return PyObject_Call(m->slow, args, kwargs);
    int owner = rs_sigint_owner();
    if (owner) {
        int is = sigint_handler_is_python(m, NULL);
        if (is < 0)
            return NULL;
        if (is)
            rs_sigint_hold();
    }
    PyObject *r = call_base(m, args, kwargs);
    if (!r)
        return abandon(m, self, owner);
    Py_DECREF(r);
    if (owner && finish(m) < 0)
        return abandon(m, self, owner);
    return none();
}

/* --- the type ---------------------------------------------------------------- */

/* p.__init__, super().__init__: a bound method; Popen.__init__: itself. */
static PyObject *init_get(PyObject *op, PyObject *obj, PyObject *type)
{
    (void)type;
    if (!obj || obj == Py_None) {
        Py_INCREF(op);
        return op;
    }
    return PyObject_CallFunctionObjArgs(((Init *)op)->method_type, op, obj, NULL);
}

#define METHOD_REFS(X) \
    X(base) X(slow) X(popen) X(name) X(method_type) X(setup_keywords) \
    X(getsignal) X(raise_signal) X(discard) X(sigint)

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

static PyObject *init_repr(PyObject *op)
{
    (void)op;
    return PyUnicode_FromString("<rdmaspawn method Popen.__init__>");
}

static PyObject *get_name(PyObject *op, void *closure)
{
    (void)closure;
    Py_INCREF(((Init *)op)->name);
    return ((Init *)op)->name;
}

static PyObject *get_qualname(PyObject *op, void *closure)
{
    (void)op;
    (void)closure;
    return PyUnicode_FromString("Popen.__init__");
}

static PyObject *get_wrapped(PyObject *op, void *closure)
{
    (void)closure;
    Py_INCREF(((Init *)op)->slow);
    return ((Init *)op)->slow;
}

/* inspect.signature() of the Python __init__, asked at each read: inspect is
 * imported only by whoever asks (start-up does without it). */
static PyObject *get_signature(PyObject *op, void *closure)
{
    (void)closure;
    PyObject *inspect = PyImport_ImportModule("inspect");
    if (!inspect)
        return NULL;
    PyObject *r = PyObject_CallMethod(inspect, "signature", "O", ((Init *)op)->slow);
    Py_DECREF(inspect);
    return r;
}

static PyObject *get_doc(PyObject *op, void *closure)
{
    (void)closure;
    return PyObject_GetAttrString(((Init *)op)->slow, "__doc__");
}

static PyGetSetDef init_getset[] = {
    {"__name__", get_name, NULL, NULL, NULL},
    {"__qualname__", get_qualname, NULL, NULL, NULL},
    {"__wrapped__", get_wrapped, NULL, NULL, NULL},
    {"__signature__", get_signature, NULL, NULL, NULL},
    {"__doc__", get_doc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot init_slots[] = {
    {Py_tp_call, (void *)init_call},
    {Py_tp_descr_get, (void *)init_get},
    {Py_tp_traverse, (void *)init_traverse},
    {Py_tp_clear, (void *)init_clear},
    {Py_tp_dealloc, (void *)init_dealloc},
    {Py_tp_repr, (void *)init_repr},
    {Py_tp_getset, init_getset},
    {0, NULL},
};

static PyType_Spec init_spec = {
    "rdmaspawn.Popen_init", sizeof(Init), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR, init_slots,
};

PyObject *rs_popen_init_new(PyObject *base, PyObject *popen, PyObject *slow,
                            PyObject *setup_keywords, PyObject *getsignal,
                            PyObject *raise_signal)
{
    static PyObject *type;  /* made once; the GIL serialises the callers */
    if (!PyType_Check(base) || !PyType_Check(popen) || !PyCallable_Check(slow)
            || !PyAnySet_Check(setup_keywords)) {
        PyErr_SetString(PyExc_TypeError, "popen_init_new: bad arguments");
        return NULL;
    }
    if (!type && !(type = PyType_FromSpec(&init_spec)))
        return NULL;
    Init *m = (Init *)PyType_GenericAlloc((PyTypeObject *)type, 0);
    if (!m)
        return NULL;
    PyObject *refs[] = {base, popen, slow, setup_keywords, getsignal, raise_signal};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        Py_INCREF(refs[i]);
    m->base = base;
    m->popen = popen;
    m->slow = slow;
    m->setup_keywords = setup_keywords;
    m->getsignal = getsignal;
    m->raise_signal = raise_signal;
    PyObject *types = PyImport_ImportModule("types");
    if (types) {
        m->method_type = PyObject_GetAttrString(types, "MethodType");
        Py_DECREF(types);
    }
    m->name = PyUnicode_InternFromString("__init__");
    m->discard = PyUnicode_InternFromString("_discard");
    m->sigint = PyLong_FromLong(SIGINT);
    if (!m->method_type || !m->name || !m->discard || !m->sigint) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}
