/*
 * rdmaspawn.Popen.__init__: CPython's __init__ with SIGINT held back around
 * it (dropin/interrupts.py says why, sigint.c how), without the Python
 * frames (hold(), finish(), replay(), a super() object, a function of its
 * own) that cost each Popen more than the hold itself.
 *
 * __init__ is a method object of this file (the "method" below), called as
 * CPython calls a Python function in a class: its type is a method
 * descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR), so Popen() passes the instance
 * as the first argument with no bound method made; attribute access on an
 * instance (super().__init__ in a subclass) gets a types.MethodType. It
 * takes the plain call itself, an instance of rdmaspawn.Popen itself (a
 * subclass's may have classes between the two in its MRO, which super()
 * finds) naming no setup keyword: CPython's __init__, given the call's own
 * arguments. Every other call goes to the "face": a Python function that
 * dropin/popen.py makes from CPython's own __init__ (its parameters and
 * defaults, then rdmaspawn's setup keywords), whose one statement calls the
 * "body" below with self and every parameter's value, positionally, in that
 * order (`layout` says where each part sits). The method answers
 * introspection (inspect, typing, pickle, copy, mock.create_autospec) as
 * that function: what its own type does not answer, the face does. It has
 * no __wrapped__ or __signature__: inspect.unwrap() of a bound method
 * passes on to the object it binds, so with them the binding was lost, and
 * inspect.signature(rdmaspawn.Popen) showed self where it unwraps what the
 * descriptor returns (gh-119605, 3.13.5).
 *
 * Why one file with two types: the method (the fast path) and the body (the
 * face's every other call) run the same SIGINT hold, replay, release and
 * undoing of an abandoned Popen; kept static here, the hold has one
 * implementation and no caller outside this file, so its rules (who owns a
 * hold, which frame a replayed handler sees) are read in one place.
 *
 * The body takes the plain call too (a setup keyword given its default) to
 * CPython's __init__; any other is turned by `prepare(self, *values)`
 * (Python) into the call to make, (init, args, kwargs), made under the same
 * hold.
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
 * code that called Popen() (the current one, or the one below it where
 * `in_face`: the face's); then the release, which raises SIGINT again for
 * what came after. 0, or -1 with an exception. */
static int finish(Init *m, int in_face)
{
    if (rs_sigint_take()) {
        PyObject *handler;
        int is = sigint_handler_is_python(m, &handler);
        if (is < 0)
            return -1;
        if (is) {
            PyObject *frame = (PyObject *)PyEval_GetFrame();  /* borrowed */
            if (frame && in_face)
                frame = PyObject_GetAttrString(frame, "f_back");
            else
                Py_XINCREF(frame);
            if (!frame && PyErr_Occurred()) {
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

/* init(*args, **kwargs) under the hold, for self; `in_face`: called by the
 * face (the current frame is its). */
static PyObject *held_call(Init *m, PyObject *self, PyObject *init,
                           PyObject *args, PyObject *kwargs, int in_face)
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
    if (owner && finish(m, in_face) < 0)
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
    r = held_call(m, PyTuple_GetItem(values, 0), init, args, kwargs, 1);
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
        r = held_call(m, PyTuple_GetItem(values, 0), init, args, kw, 1);
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

/* Both types': their own clear, then the free. */
static void dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    ((inquiry)PyType_GetSlot(type, Py_tp_clear))(op);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(op);
    Py_DECREF(type);
}

static PyType_Slot init_slots[] = {
    {Py_tp_call, (void *)init_call},
    {Py_tp_traverse, (void *)init_traverse},
    {Py_tp_clear, (void *)init_clear},
    {Py_tp_dealloc, (void *)dealloc},
    {Py_tp_doc, (void *)"rdmaspawn.Popen.__init__'s body: (self, *values), each "
                        "parameter's value in the function's order."},
    {0, NULL},
};

static PyType_Spec init_spec = {
    "rdmaspawn.Popen_init", sizeof(Init), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, init_slots,
};

/* The body's type: made once (the GIL serialises the callers); the method
 * takes only a body of it. */
static PyObject *init_type;

PyObject *rs_popen_init_new(PyObject *module, PyObject *args)
{
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
    if (!init_type && !(init_type = PyType_FromSpec(&init_spec)))
        return NULL;
    Init *m = (Init *)PyType_GenericAlloc((PyTypeObject *)init_type, 0);
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

/* --- the method -------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *body;            /* the Init above: its hold, its classes */
    PyObject *face;            /* the Python __init__: every call but the plain
                                * one, and what introspection asks */
    PyObject *setup_keywords;  /* a frozenset: a call naming one is not plain */
    PyObject *method_type;     /* types.MethodType, for access on an instance */
} Method;

/* Whether kwargs names a setup keyword: 1, 0, or -1 with an exception. */
static int names_setup_keyword(Method *me, PyObject *kwargs)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
        int found = PySet_Contains(me->setup_keywords, key);
        if (found)
            return found;
    }
    return 0;
}

static PyObject *method_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    Method *me = (Method *)op;
    Init *m = (Init *)me->body;
    if (PyTuple_Size(args) < 1
            || (PyObject *)Py_TYPE(PyTuple_GetItem(args, 0)) != m->popen)
        return PyObject_Call(me->face, args, kwargs);
    if (kwargs) {
        int named = names_setup_keyword(me, kwargs);
        if (named < 0)
            return NULL;
        if (named)
            return PyObject_Call(me->face, args, kwargs);
    }
    PyObject *init = PyObject_GetAttr(m->base, m->name);
    if (!init)
        return NULL;
    PyObject *r = held_call(m, PyTuple_GetItem(args, 0), init, args, kwargs, 0);
    Py_DECREF(init);
    return r;
}

/* p.__init__, super().__init__: a bound method; Popen.__init__: itself. */
static PyObject *method_get(PyObject *op, PyObject *obj, PyObject *type)
{
    (void)type;
    if (!obj || obj == Py_None) {
        Py_INCREF(op);
        return op;
    }
    return PyObject_CallFunctionObjArgs(((Method *)op)->method_type, op, obj, NULL);
}

/* The face's answer for what the type does not answer, and for the two it
 * answers as a type would (its own doc and module), where a function
 * answers its own. */
static PyObject *method_getattro(PyObject *op, PyObject *name)
{
    if (PyUnicode_CompareWithASCIIString(name, "__doc__") != 0
            && PyUnicode_CompareWithASCIIString(name, "__module__") != 0) {
        PyObject *r = PyObject_GenericGetAttr(op, name);
        if (r || !PyErr_ExceptionMatches(PyExc_AttributeError))
            return r;
        PyErr_Clear();
    }
    return PyObject_GetAttr(((Method *)op)->face, name);
}

/* pickle saves it by name, as a function (Popen.__init__, found in its
 * module); copy and deepcopy return it. */
static PyObject *method_reduce(PyObject *op, PyObject *unused)
{
    (void)unused;
    return PyObject_GetAttrString(((Method *)op)->face, "__qualname__");
}

static PyObject *method_repr(PyObject *op)
{
    PyObject *qualname = PyObject_GetAttrString(((Method *)op)->face, "__qualname__");
    if (!qualname)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<rdmaspawn function %U>", qualname);
    Py_DECREF(qualname);
    return r;
}

#define METHOD_OBJ_REFS(X) X(body) X(face) X(setup_keywords) X(method_type)

static int method_traverse(PyObject *op, visitproc visit, void *arg)
{
    Method *me = (Method *)op;
#define VISIT(f) Py_VISIT(me->f);
    METHOD_OBJ_REFS(VISIT)
#undef VISIT
    Py_VISIT(Py_TYPE(op));
    return 0;
}

static int method_clear(PyObject *op)
{
    Method *me = (Method *)op;
#define CLEAR(f) Py_CLEAR(me->f);
    METHOD_OBJ_REFS(CLEAR)
#undef CLEAR
    return 0;
}

static PyMethodDef method_methods[] = {
    {"__reduce__", method_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot method_slots[] = {
    {Py_tp_call, (void *)method_call},
    {Py_tp_descr_get, (void *)method_get},
    {Py_tp_getattro, (void *)method_getattro},
    {Py_tp_repr, (void *)method_repr},
    {Py_tp_methods, method_methods},
    {Py_tp_traverse, (void *)method_traverse},
    {Py_tp_clear, (void *)method_clear},
    {Py_tp_dealloc, (void *)dealloc},
    {0, NULL},
};

static PyType_Spec method_spec = {
    "rdmaspawn.Popen_init_method", sizeof(Method), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR, method_slots,
};

PyObject *rs_popen_init_method(PyObject *module, PyObject *args)
{
    static PyObject *type;  /* made once; the GIL serialises the callers */
    PyObject *body, *face, *setup_keywords;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO!:popen_init_method", &body, &face,
                          &PyFrozenSet_Type, &setup_keywords))
        return NULL;
    if (!init_type || Py_TYPE(body) != (PyTypeObject *)init_type || !PyCallable_Check(face)) {
        PyErr_SetString(PyExc_TypeError,
                        "popen_init_method: body is not popen_init_new's, or face not callable");
        return NULL;
    }
    if (!type && !(type = PyType_FromSpec(&method_spec)))
        return NULL;
    Method *me = (Method *)PyType_GenericAlloc((PyTypeObject *)type, 0);
    if (!me)
        return NULL;
    Py_INCREF(body);
    Py_INCREF(face);
    Py_INCREF(setup_keywords);
    me->body = body;
    me->face = face;
    me->setup_keywords = setup_keywords;
    PyObject *types = PyImport_ImportModule("types");
    if (types) {
        me->method_type = PyObject_GetAttrString(types, "MethodType");
        Py_DECREF(types);
    }
    if (!me->method_type) {
        Py_DECREF(me);
        return NULL;
    }
    return (PyObject *)me;
}
