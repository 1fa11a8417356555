/*
 * pipe(), read() and close() of the error pipe kept in memory
 * (rdmaspawn/dropin/errpipe.py says why and what the numbers are). CPython's
 * recompiled _execute_child calls each once per spawn: as builtins, without
 * a Python frame each, on the big ints (2**30 and up) the numbers are.
 *
 * pipe() is given the fork_exec that the method is about to call, and keeps
 * the pipe in memory only where that is one of rdmaspawn's, reached through
 * nothing but rdmaspawn's guard's wrappers (which hand each call on
 * unchanged): anything else (CPython's own, a test's mock, another
 * library's wrapper) may write into the pipe or hand it to a child, and
 * gets a real one from os.pipe(), looked up at the call.
 *
 * The pipes live in errpipe.py's dict, shared with its write() and
 * call_with_real_pipe(): read end -> bytes written and not read yet, or the
 * exception that a read must raise. A number below the first is a real
 * descriptor and goes to os's own function. All three run with the GIL,
 * which serialises them and errpipe.py's.
 */
#include "binding.h"

#include <errno.h>
#include <limits.h>

static PyObject *pipes;      /* errpipe.py's _pipes */
static PyObject *os_module;  /* for a real descriptor */
static PyObject *guard_mark; /* the attribute on rdmaspawn's guard's wrappers */
static long first_fd;
static unsigned long next_pair;

/* os.<name>(args...) for a real descriptor, looked up at the call: with no
 * format string (an abi3 build's varargs formats differ between versions). */
static PyObject *call_os(const char *name, PyObject *a, PyObject *b)
{
    PyObject *func = PyObject_GetAttrString(os_module, name);
    if (!func)
        return NULL;
    PyObject *out = PyObject_CallFunctionObjArgs(func, a, b, NULL);
    Py_DECREF(func);
    return out;
}

/* 1 if a call of fork_exec reaches one of rdmaspawn's fork_exec objects with
 * its arguments unchanged, 0 if not, -1 with an exception. */
static int reaches_ours(PyObject *fork_exec)
{
    PyObject *link = fork_exec;
    Py_INCREF(link);
    for (int depth = 0; depth < 64; depth++) {   /* longer: a cycle */
        if (rs_is_fork_exec(link)) {
            Py_DECREF(link);
            return 1;
        }
        PyObject *mark = PyObject_GetAttr(link, guard_mark);
        int marked = mark ? PyObject_IsTrue(mark) : 0;
        Py_XDECREF(mark);
        PyObject *inner = marked == 1 ? PyObject_GetAttrString(link, "__wrapped__") : NULL;
        Py_DECREF(link);
        if (!inner) {
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            return 0;
        }
        link = inner;
    }
    Py_DECREF(link);
    return 0;
}

/* (read end, write end, fork_exec): the method calls the fork_exec returned,
 * the one the pipe was made for, not the one it would look up again. */
static PyObject *errpipe_pipe(PyObject *unused, PyObject *fork_exec)
{
    (void)unused;
    int ours = reaches_ours(fork_exec);
    if (ours < 0)
        return NULL;
    if (ours == 0) {
        PyObject *got = call_os("pipe", NULL, NULL);
        PyObject *real = got ? PySequence_Tuple(got) : NULL;   /* unpacked as CPython's line does */
        Py_XDECREF(got);
        if (!real)
            return NULL;
        Py_ssize_t n = PyTuple_Size(real);
        PyObject *out = n != 2 ? NULL
            : Py_BuildValue("(OOO)", PyTuple_GetItem(real, 0), PyTuple_GetItem(real, 1), fork_exec);
        Py_DECREF(real);
        if (n != 2)
            PyErr_Format(PyExc_ValueError, n > 2 ? "too many values to unpack (expected 2)"
                         : "not enough values to unpack (expected 2, got %zd)", n);
        return out;
    }
    long pairs = ((long)INT_MAX - first_fd) / 2;   /* both ends stay C ints */
    long fd = first_fd + 2 * (long)(next_pair++ % (unsigned long)pairs);
    /* Built by hand, not by Py_BuildValue: this runs at every spawn, and
     * parsing a format costs more than the rest of the call. */
    PyObject *read_end = PyLong_FromLong(fd), *write_end = PyLong_FromLong(fd + 1);
    PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
    PyObject *out = read_end && write_end && empty ? PyTuple_New(3) : NULL;
    if (out) {
        Py_INCREF(fork_exec);
        PyTuple_SetItem(out, 0, read_end);   /* each steals its reference */
        PyTuple_SetItem(out, 1, write_end);
        PyTuple_SetItem(out, 2, fork_exec);
        if (PyDict_SetItem(pipes, read_end, empty) < 0)
            Py_CLEAR(out);
    } else {
        Py_XDECREF(read_end);
        Py_XDECREF(write_end);
    }
    Py_XDECREF(empty);
    return out;
}

static PyObject *errpipe_read(PyObject *unused, PyObject *args)
{
    (void)unused;
    if (PyTuple_Size(args) != 2)   /* os.read's words; not PyArg_UnpackTuple: every spawn */
        return rs_fail(PyExc_TypeError, "read expected 2 arguments, got %zd", PyTuple_Size(args));
    PyObject *key = PyTuple_GetItem(args, 0), *size = PyTuple_GetItem(args, 1);
    long fd = PyLong_AsLong(key);
    Py_ssize_t n = PyLong_AsSsize_t(size);
    if (PyErr_Occurred())
        return NULL;
    if (fd < first_fd)
        return call_os("read", key, size);
    Py_INCREF(key);
    PyObject *held = PyDict_GetItemWithError(pipes, key);   /* borrowed */
    PyObject *out = NULL, *rest = NULL;
    if (!held) {
        if (!PyErr_Occurred()) {
            errno = EBADF;
            PyErr_SetFromErrno(PyExc_OSError);
        }
    } else if (PyExceptionInstance_Check(held)) {
        /* What call_with_real_pipe()'s read raised: raised here, once. */
        Py_INCREF(held);
        if ((rest = PyBytes_FromStringAndSize(NULL, 0)) && PyDict_SetItem(pipes, key, rest) == 0)
            PyErr_SetObject((PyObject *)Py_TYPE(held), held);
        Py_DECREF(held);
    } else if (PyBytes_Check(held) && n >= 0) {
        Py_ssize_t size = PyBytes_Size(held), take = size < n ? size : n;
        const char *data = PyBytes_AsString(held);
        if ((out = PyBytes_FromStringAndSize(data, take))
                && (!(rest = PyBytes_FromStringAndSize(data + take, size - take))
                    || PyDict_SetItem(pipes, key, rest) < 0))
            Py_CLEAR(out);
    } else {
        PyErr_SetString(PyExc_ValueError, "read length must be non-negative");
    }
    Py_XDECREF(rest);
    Py_DECREF(key);
    return out;
}

static PyObject *errpipe_close(PyObject *unused, PyObject *arg)
{
    (void)unused;
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < first_fd)
        return call_os("close", arg, NULL);
    /* The read end's close drops the pipe; the write end has none of its own. */
    if (PyDict_DelItem(pipes, arg) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            return NULL;
        PyErr_Clear();
    }
    return none();
}

static PyMethodDef calls[] = {
    {"pipe", errpipe_pipe, METH_O,
     "os.pipe() for the error pipe of a call of fork_exec: (read end, write end, fork_exec)."},
    {"read", errpipe_read, METH_VARARGS, "os.read(fd, n) of the error pipe."},
    {"close", errpipe_close, METH_O, "os.close(fd) of an end of the error pipe."},
};

PyObject *rs_errpipe_calls(PyObject *module, PyObject *args)
{
    PyObject *pipes_dict, *os, *mark;
    long first;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!OlO!:errpipe_calls", &PyDict_Type, &pipes_dict, &os, &first,
                          &PyUnicode_Type, &mark))
        return NULL;
    if (first < 3 || first > INT_MAX - 1)
        return rs_fail(PyExc_TypeError, "rs_errpipe_calls: bad arguments");
    Py_XDECREF(pipes);
    Py_XDECREF(os_module);
    Py_XDECREF(guard_mark);
    Py_INCREF(pipes_dict);
    pipes = pipes_dict;
    Py_INCREF(os);
    os_module = os;
    Py_INCREF(mark);
    guard_mark = mark;
    first_fd = first;
    return Py_BuildValue("(NNN)", PyCFunction_NewEx(&calls[0], NULL, NULL),
                         PyCFunction_NewEx(&calls[1], NULL, NULL),
                         PyCFunction_NewEx(&calls[2], NULL, NULL));
}
