/*
 * rdmaspawn.Popen.__init__: CPython's __init__ with SIGINT held back around
 * it (dropin/interrupts.py says why, sigint.c how), without the Python
 * frames (hold(), finish(), replay(), a super() object, a function of its
 * own) that cost each Popen more than the hold itself.
 *
 * The "method" below is __init__, a method descriptor, so Popen() passes
 * the instance with no bound method made. It takes the plain call itself:
 * an instance of rdmaspawn.Popen itself (a subclass's may have classes
 * between the two in its MRO, which super() finds) naming no setup keyword.
 * Any other goes to the "face", the Python function dropin/popen.py makes
 * from CPython's parameters plus the setup keywords, which calls the "body"
 * below with self and each value, positionally. Introspection gets the
 * face's answers, but no __wrapped__ or __signature__: inspect.unwrap() of a
 * bound method passes on to them, and the binding was lost (gh-119605).
 *
 * One file because the method and the body share the hold, replay, release
 * and undoing of an abandoned Popen: the hold's rules (who owns a hold,
 * which frame a replayed handler sees) are read in one place.
 */
#include "binding.h"

#include <signal.h>

/* The body's state: a tuple, the builtin function's self. */
enum {
    S_BASE,     /* subprocess.Popen: its __init__, read at each call (as
                 * super() would: a wrapper put on it later is called too) */
    S_POPEN,    /* rdmaspawn.Popen: the class whose instances come here */
    S_PREPARE,  /* (self, *values) -> (init, args, kwargs): every call that
                 * is not plain */
    S_NPOSITIONAL,      /* CPython's positional parameters, self included */
    S_KWONLY_NAMES,     /* CPython's keyword-only parameters, a tuple */
    S_KWONLY_DEFAULTS,  /* and each one's default (passed on only when the
                         * value is another object) */
    S_SETUP_DEFAULTS,   /* each setup keyword's default: a call that gives
                         * one another value is not plain */
    S_GETSIGNAL, S_RAISE_SIGNAL,  /* _signal's */
    S_NAME,     /* "__init__" */
    S_DISCARD,  /* "_discard": self._discard() undoes a Popen never returned */
    S_SIGINT,
};

#define AT(state, i) PyTuple_GetItem(state, i)

/* --- the hold ---------------------------------------------------------------- */

/* Whether SIGINT's handler is one from Python (only those can raise); -1
 * with an exception. */
static int sigint_handler_is_python(PyObject *s, PyObject **handler)
{
    PyObject *h = PyObject_CallFunctionObjArgs(AT(s, S_GETSIGNAL), AT(s, S_SIGINT), NULL);
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
static int raise_sigint(PyObject *s)
{
    PyObject *r = PyObject_CallFunctionObjArgs(AT(s, S_RAISE_SIGNAL), AT(s, S_SIGINT), NULL);
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
static int finish(PyObject *s, int in_face)
{
    if (rs_sigint_take()) {
        PyObject *handler;
        int is = sigint_handler_is_python(s, &handler);
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
            PyObject *r = PyObject_CallFunctionObjArgs(handler, AT(s, S_SIGINT),
                                                       frame ? frame : Py_None, NULL);
            Py_XDECREF(frame);
            Py_DECREF(handler);
            if (!r)
                return -1;
            Py_DECREF(r);
        }
    }
    if (rs_sigint_release() && raise_sigint(s) < 0)
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
static PyObject *abandon(PyObject *s, PyObject *self, int owner)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = PyObject_CallMethodObjArgs(self, AT(s, S_DISCARD), NULL);
    int ok = r != NULL;
    Py_XDECREF(r);
    if (owner && rs_sigint_release() && ok)
        ok = raise_sigint(s) == 0;
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
static PyObject *held_call(PyObject *s, PyObject *self, PyObject *init,
                           PyObject *args, PyObject *kwargs, int in_face)
{
    int owner = rs_sigint_owner();
    if (owner) {
        int is = sigint_handler_is_python(s, NULL);
        if (is < 0)
            return NULL;
        if (is)
            rs_sigint_hold();
    }
    PyObject *r = PyObject_Call(init, args, kwargs);
    if (!r)
        return abandon(s, self, owner);
    Py_DECREF(r);
    if (owner && finish(s, in_face) < 0)
        return abandon(s, self, owner);
    return none();
}

/* --- the body ---------------------------------------------------------------- */

/* Whether the call is plain: rdmaspawn.Popen's own instance, each setup
 * keyword at its default. */
static int is_plain(PyObject *s, PyObject *values, Py_ssize_t n)
{
    PyObject *defaults = AT(s, S_SETUP_DEFAULTS);
    if ((PyObject *)Py_TYPE(PyTuple_GetItem(values, 0)) != AT(s, S_POPEN))
        return 0;
    Py_ssize_t nsetup = PyTuple_Size(defaults);
    for (Py_ssize_t i = 0; i < nsetup; i++)
        if (PyTuple_GetItem(values, n - nsetup + i) != PyTuple_GetItem(defaults, i))
            return 0;
    return 1;
}

/* The plain call: CPython's __init__ with its positional parameters
 * positionally and each keyword-only one not at its default by name. */
static PyObject *plain_call(PyObject *s, PyObject *values, Py_ssize_t npositional)
{
    PyObject *names = AT(s, S_KWONLY_NAMES), *defaults = AT(s, S_KWONLY_DEFAULTS);
    PyObject *kwargs = NULL, *r = NULL;
    PyObject *args = PyTuple_GetSlice(values, 0, npositional);
    PyObject *init = args ? PyObject_GetAttr(AT(s, S_BASE), AT(s, S_NAME)) : NULL;
    if (!init)
        goto out;
    for (Py_ssize_t i = 0; i < PyTuple_Size(names); i++) {
        PyObject *value = PyTuple_GetItem(values, npositional + i);
        if (value == PyTuple_GetItem(defaults, i))
            continue;
        if ((!kwargs && !(kwargs = PyDict_New()))
                || PyDict_SetItem(kwargs, PyTuple_GetItem(names, i), value) < 0)
            goto out;
    }
    r = held_call(s, PyTuple_GetItem(values, 0), init, args, kwargs, 1);
out:
    Py_XDECREF(init);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return r;
}

/* body(self, *values): each parameter's value in the face's order. */
static PyObject *body_call(PyObject *s, PyObject *values)
{
    Py_ssize_t npositional = PyLong_AsSsize_t(AT(s, S_NPOSITIONAL));
    Py_ssize_t n = PyTuple_Size(values);
    if (n != npositional + PyTuple_Size(AT(s, S_KWONLY_NAMES))
             + PyTuple_Size(AT(s, S_SETUP_DEFAULTS)))
        return rs_fail(PyExc_TypeError,
                       "Popen.__init__'s body takes each parameter's value, positionally");
    if (is_plain(s, values, n))
        return plain_call(s, values, npositional);
    PyObject *call = PyObject_Call(AT(s, S_PREPARE), values, NULL);
    if (!call)
        return NULL;
    PyObject *init, *args, *kw, *r = NULL;
    if (PyArg_ParseTuple(call, "OO!O!:prepare", &init, &PyTuple_Type, &args,
                         &PyDict_Type, &kw))
        r = held_call(s, PyTuple_GetItem(values, 0), init, args, kw, 1);
    Py_DECREF(call);
    return r;
}

static PyMethodDef body_def = {
    "Popen_init", body_call, METH_VARARGS,
    "rdmaspawn.Popen.__init__'s body: (self, *values), each parameter's value in "
    "the function's order.",
};

/* popen_init_new(base, popen, prepare, (npositional, kwonly_names,
 * kwonly_defaults, setup_defaults), getsignal, raise_signal): the body. */
PyObject *rs_popen_init_new(PyObject *module, PyObject *args)
{
    Py_ssize_t npositional;
    PyObject *base, *popen, *prepare, *getsignal, *raise_signal;
    PyObject *kwonly_names, *kwonly_defaults, *setup_defaults;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!O(nO!O!O!)OO:popen_init_new", &PyType_Type, &base,
                          &PyType_Type, &popen, &prepare, &npositional, &PyTuple_Type,
                          &kwonly_names, &PyTuple_Type, &kwonly_defaults, &PyTuple_Type,
                          &setup_defaults, &getsignal, &raise_signal))
        return NULL;
    if (npositional < 1 || PyTuple_Size(kwonly_names) != PyTuple_Size(kwonly_defaults))
        return rs_fail(PyExc_TypeError, "popen_init_new: bad layout");
    PyObject *state = Py_BuildValue(
        "(OOOnOOOOONNi)", base, popen, prepare, npositional, kwonly_names, kwonly_defaults,
        setup_defaults, getsignal, raise_signal, PyUnicode_InternFromString("__init__"),
        PyUnicode_InternFromString("_discard"), SIGINT);
    if (!state)
        return NULL;
    PyObject *body = PyCFunction_NewEx(&body_def, state, NULL);
    Py_DECREF(state);
    return body;
}

/* --- the method -------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *state;           /* the body's */
    PyObject *face;            /* the Python __init__: every call but the plain
                                * one, and what introspection asks */
    PyObject *setup_keywords;  /* a frozenset: a call naming one is not plain */
} Method;

/* Made once, with the method type; the GIL serialises the callers. */
static PyObject *method_type;   /* types.MethodType, for access on an instance */

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
    PyObject *s = me->state;
    if (PyTuple_Size(args) < 1
            || (PyObject *)Py_TYPE(PyTuple_GetItem(args, 0)) != AT(s, S_POPEN))
        return PyObject_Call(me->face, args, kwargs);
    if (kwargs) {
        int named = names_setup_keyword(me, kwargs);
        if (named < 0)
            return NULL;
        if (named)
            return PyObject_Call(me->face, args, kwargs);
    }
    PyObject *init = PyObject_GetAttr(AT(s, S_BASE), AT(s, S_NAME));
    if (!init)
        return NULL;
    PyObject *r = held_call(s, PyTuple_GetItem(args, 0), init, args, kwargs, 0);
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
    return PyObject_CallFunctionObjArgs(method_type, op, obj, NULL);
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
    PyObject *qualname = method_reduce(op, NULL);
    if (!qualname)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<rdmaspawn function %U>", qualname);
    Py_DECREF(qualname);
    return r;
}

static int method_traverse(PyObject *op, visitproc visit, void *arg)
{
    Method *me = (Method *)op;
    Py_VISIT(me->state);
    Py_VISIT(me->face);
    Py_VISIT(me->setup_keywords);
    Py_VISIT(Py_TYPE(op));
    return 0;
}

static int method_clear(PyObject *op)
{
    Method *me = (Method *)op;
    Py_CLEAR(me->state);
    Py_CLEAR(me->face);
    Py_CLEAR(me->setup_keywords);
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
    {Py_tp_dealloc, (void *)rs_gc_dealloc},
    {0, NULL},
};

static PyType_Spec method_spec = {
    "rdmaspawn.Popen_init_method", sizeof(Method), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR, method_slots,
};

/* popen_init_method(body, face, setup_keywords): the method. */
PyObject *rs_popen_init_method(PyObject *module, PyObject *args)
{
    static PyObject *type;
    PyObject *body, *face, *setup_keywords;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO!:popen_init_method", &body, &face,
                          &PyFrozenSet_Type, &setup_keywords))
        return NULL;
    if (!PyCFunction_Check(body) || PyCFunction_GetFunction(body) != body_call
            || !PyCallable_Check(face))
        return rs_fail(PyExc_TypeError,
                       "popen_init_method: body is not popen_init_new's, or face not callable");
    if (!type) {
        PyObject *types = PyImport_ImportModule("types");
        method_type = types ? PyObject_GetAttrString(types, "MethodType") : NULL;
        Py_XDECREF(types);
        if (!method_type || !(type = PyType_FromSpec(&method_spec))) {
            Py_CLEAR(method_type);
            return NULL;
        }
    }
    Method *me = (Method *)PyType_GenericAlloc((PyTypeObject *)type, 0);
    if (!me)
        return NULL;
    me->state = PyCFunction_GetSelf(body);
    Py_INCREF(me->state);
    Py_INCREF(face);
    me->face = face;
    Py_INCREF(setup_keywords);
    me->setup_keywords = setup_keywords;
    return (PyObject *)me;
}
