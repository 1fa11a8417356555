/*
 * Whether one argument of fork_exec (or of _posix_spawn) is plain, and its C
 * form: the values the C paths of fork_exec.c, posix_spawn.c and spawn_request.c take as they
 * are; and the spawn and the name list those three share. Anything else (another type, a
 * number out of range, a NUL inside a string) is "not plain", never an
 * error: the call goes to the Python implementation, which raises CPython's
 * exceptions. Each function answers 1 (plain, *out set) or 0, and what the C
 * form points into is kept alive in a struct rs_held until the spawn is over.
 */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
#  define Py_LIMITED_API 0x03090000   /* see fork_exec.c */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <string.h>

#include "rdmaspawn.h"
#include "plain.h"

void *rs_held_block(struct rs_held *h, size_t size)
{
    h->block = size <= sizeof h->slots ? (void *)h->slots : PyMem_Malloc(size);
    return h->block;
}

void rs_held_release(struct rs_held *h)
{
    if (h->block != (void *)h->slots)
        PyMem_Free(h->block);
    for (int i = 0; i < h->n_objects; i++)
        Py_DECREF(h->objects[i]);
    Py_XDECREF(h->more);
    rs_held_init(h);
}

/* Keep obj alive until the spawn is over (a new reference is taken). */
static int keep_alive(struct rs_held *h, PyObject *obj)
{
    if (h->n_objects < RS_HELD_OBJECTS) {
        Py_INCREF(obj);
        h->objects[h->n_objects++] = obj;
        return 1;
    }
    if (!h->more && !(h->more = PyList_New(0)))
        return 0;
    return PyList_Append(h->more, obj) == 0;
}

int rs_plain_int(PyObject *o, int *out)
{
    int overflow;
    long v;

    if (Py_TYPE(o) != &PyLong_Type)
        return 0;
    v = PyLong_AsLongAndOverflow(o, &overflow);
    if (overflow || v < INT_MIN || v > INT_MAX)
        return 0;
    *out = (int)v;
    return 1;
}

/* True or False only: CPython takes other values by their truth or as a C
 * int, depending on its version and path, which the Python side knows. */
int rs_plain_flag(PyObject *o, int *out)
{
    if (o != Py_True && o != Py_False)
        return 0;
    *out = o == Py_True;
    return 1;
}

const char *rs_plain_string(PyObject *o, struct rs_held *h)
{
    char *s;
    Py_ssize_t n;

    if (Py_TYPE(o) == &PyUnicode_Type) {
        PyObject *enc = PyUnicode_EncodeFSDefault(o);
        if (!enc)
            return NULL;
        int ok = keep_alive(h, enc);
        Py_DECREF(enc);
        if (!ok)
            return NULL;
        o = enc;            /* alive in h */
    } else if (Py_TYPE(o) != &PyBytes_Type) {
        return NULL;
    }
    if (PyBytes_AsStringAndSize(o, &s, &n) < 0 || (size_t)n != strlen(s))
        return NULL;
    return s;
}

/* A list is copied to a tuple first: while the GIL is released for the
 * spawn, another thread could remove an item from the list and free the
 * string the child is about to read (CPython's fork_exec copies each string;
 * a tuple of the same objects is enough, bytes being immutable). */
int rs_plain_strings(PyObject *seq, Py_ssize_t n, char **out, struct rs_held *h)
{
    if (Py_TYPE(seq) == &PyList_Type) {
        PyObject *copy = PyList_AsTuple(seq);
        int ok = copy && keep_alive(h, copy);
        Py_XDECREF(copy);
        if (!ok)
            return 0;
        seq = copy;         /* alive in h */
    }
    if (PyTuple_Size(seq) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(seq, i);
        if (!item || !(out[i] = (char *)rs_plain_string(item, h)))
            return 0;
    }
    out[n] = NULL;
    return 1;
}

Py_ssize_t rs_plain_length(PyObject *seq)
{
    if (Py_TYPE(seq) == &PyList_Type)
        return PyList_Size(seq);
    if (Py_TYPE(seq) == &PyTuple_Type)
        return PyTuple_Size(seq);
    return -1;
}

void rs_spawn_held(const struct rs_request *r, struct rs_result *res, struct rs_held *h)
{
    Py_BEGIN_ALLOW_THREADS
    rs_spawn(r, res);
    Py_END_ALLOW_THREADS
    rs_held_release(h);
}

int rs_plain_command(PyObject *argv, Py_ssize_t argc, PyObject *exec_list, Py_ssize_t nexec,
                     PyObject *env, Py_ssize_t nenv, PyObject *cwd, char **ptrs,
                     struct rs_request *r, struct rs_held *h)
{
    char **exec_ptrs = ptrs + argc + 1, **envp = exec_ptrs + nexec + 1;

    if (!rs_plain_strings(argv, argc, ptrs, h) || !rs_plain_strings(exec_list, nexec, exec_ptrs, h))
        return 0;
    if (env != Py_None && !rs_plain_strings(env, nenv, envp, h))
        return 0;
    if (cwd != Py_None && !(r->cwd = rs_plain_string(cwd, h)))
        return 0;
    r->argv = ptrs;
    r->exec_list = exec_ptrs;
    r->envp = envp;
    return 1;
}
