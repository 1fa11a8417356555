/*
 * What csrc/python/ adds for the Python binding only, made builtins of the
 * extension module rdmaspawn._native._capi by functions.c; what each builtin
 * takes is in its docstring there.
 */
#ifndef RDMASPAWN_BINDING_H
#define RDMASPAWN_BINDING_H

/* The module is built for the limited API (one abi3 wheel for CPython 3.9+),
 * so this directory keeps to it; free-threaded builds have none. */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
#  define Py_LIMITED_API 0x03090000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>

/* SIGINT held back while rdmaspawn.Popen builds a child (sigint.c): held
 * says whether a hold is on; hold swaps in a handler that counts (1: held;
 * 0: nothing held: nested, or SIGINT is SIG_DFL or SIG_IGN); take returns
 * how many arrived since the hold or the last take; release puts the
 * program's action back and returns how many arrived since the last take. */
int rs_sigint_held(void);
int rs_sigint_hold(void);
long rs_sigint_take(void);
long rs_sigint_release(void);

/* The thread that runs Python's signal handlers, by its ident (sigint.c);
 * whether the calling thread is it with no hold on, so that it may hold
 * SIGINT back. */
void rs_sigint_set_main(unsigned long ident);
int rs_sigint_owner(void);

/* The C environment for a spawn with env=None (environ.c): its entry count,
 * then a private copy of the array (count pointers and a NULL) into out.
 * Both with the GIL held. */
int rs_environ_count(void);
void rs_environ_snapshot(char **out, int count);

/* A new reference to None. Not Py_RETURN_NONE: the 3.12.0-3.12.x headers
 * define it as a bare `return Py_None` (None is immortal there) even for
 * the limited API, and a module built with them and loaded by 3.9-3.11 then
 * frees None ("deallocating None"). Py_INCREF keeps the count
 * right on every version. */
static inline PyObject *none(void)
{
    Py_INCREF(Py_None);
    return Py_None;
}

/* exc raised with format's message (PyErr_Format's): NULL, for any pointer's return. */
static inline void *rs_fail(PyObject *exc, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyErr_FormatV(exc, format, va);
    va_end(va);
    return NULL;
}

/* rs_fail()'s exception raised: 0, for a function that returns 0 on failure. */
#define rs_refuse(...) (rs_fail(__VA_ARGS__), 0)

/* tp_dealloc of a heap type with GC: its own tp_clear, then the free. */
static inline void rs_gc_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    ((inquiry)PyType_GetSlot(type, Py_tp_clear))(op);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(op);
    Py_DECREF(type);
}

/* functions.c's builtins, by file. fork_exec.c: */
PyObject *rs_fork_exec_params(PyObject *module, PyObject *unused);
PyObject *rs_fork_exec_new(PyObject *module, PyObject *args);
PyObject *rs_fork_exec_setup(PyObject *module, PyObject *call);
/* Whether obj is one of fork_exec_new()'s objects. */
int rs_is_fork_exec(PyObject *obj);

/* errpipe.c: */
PyObject *rs_errpipe_calls(PyObject *module, PyObject *args);

/* convert.c: */
PyObject *rs_spawn_posix(PyObject *module, PyObject *args);
PyObject *rs_spawn_request_fields(PyObject *module, PyObject *unused);
PyObject *rs_spawn_request(PyObject *module, PyObject *args);
PyObject *rs_set_spawn_error(PyObject *module, PyObject *make);
/* A failed spawn's exception, made by set_spawn_error()'s make, raised:
 * NULL. */
struct rs_result;
PyObject *rs_raise_spawn_error(const struct rs_result *res, int flags, PyObject *cwd,
                               PyObject *exec_list);
/* Names separated by spaces as a new tuple of str: a C parameter list the
 * binding compares with its own. */
PyObject *rs_names_tuple(const char *names);

/* popen_init.c: */
PyObject *rs_popen_init_new(PyObject *module, PyObject *args);
PyObject *rs_popen_init_method(PyObject *module, PyObject *args);

/* heldfork.c: */
PyObject *rs_held_fork(PyObject *module, PyObject *args);

#endif
