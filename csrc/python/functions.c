/*
 * The binding's C functions that must keep the GIL: what rdmaspawn.Popen
 * calls on every spawn besides fork_exec, and Popen._posix_spawn's call
 * (convert.c: it releases the GIL for the spawn alone).
 *
 * cffi releases the GIL for every call it makes, even one that does nothing
 * but set a variable; with several threads spawning, each release is a GIL
 * hand-over (a futex wake and a context switch) that cuts their throughput.
 * These are the builtins of an extension module instead, whose init lives in
 * the cffi-built library itself: rdmaspawn/_native/capi.py loads the same
 * file under this module's name, so the loader hands back the handle it
 * already has and both modules share every static (one SIGINT hold, one
 * spawn count).
 */
#include "binding.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>

/* --- the builtins ---------------------------------------------------------- */

/* os.close() for an fd whose close cannot block (a pidfd): without
 * releasing the GIL around it. */
static PyObject *close_fd(PyObject *module, PyObject *fd)
{
    (void)module;
    long value = PyLong_AsLong(fd);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    if (value < 0 || value > INT_MAX) {
        errno = EBADF;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (close((int)value) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return none();
}

/* sigint.c's hold, for dropin/interrupts.py (every rdmaspawn.Popen in the
 * main thread): a system call each way, without the GIL hand-over of cffi;
 * whether this Popen may hold SIGINT back (the main thread, no hold on yet)
 * a builtin too: it is asked on every Popen, and a Python function's call
 * cost more than the question. Each answers f() as make() makes it. */
#define SIGINT_BUILTIN(name, make)                                   \
    static PyObject *name(PyObject *module, PyObject *unused)        \
    {                                                                \
        (void)module;                                                \
        (void)unused;                                                \
        return make(rs_##name());                                    \
    }

SIGINT_BUILTIN(sigint_hold, PyBool_FromLong)
SIGINT_BUILTIN(sigint_owner, PyBool_FromLong)
SIGINT_BUILTIN(sigint_held, PyBool_FromLong)
SIGINT_BUILTIN(sigint_take, PyLong_FromLong)
SIGINT_BUILTIN(sigint_release, PyLong_FromLong)

/* The thread that runs Python's signal handlers (dropin/interrupts.py sets
 * it at import and after os.fork()), for sigint_owner(). */
static PyObject *sigint_set_main(PyObject *module, PyObject *ident)
{
    (void)module;
    unsigned long value = PyLong_AsUnsignedLong(ident);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    rs_sigint_set_main(value);
    return none();
}

static PyMethodDef functions[] = {
    {"close_fd", close_fd, METH_O, "os.close() without releasing the GIL."},
    {"sigint_hold", sigint_hold, METH_NOARGS,
     "Hold SIGINT back (count it); False where nothing is held."},
    {"sigint_set_main", sigint_set_main, METH_O,
     "The thread that runs Python's signal handlers, by its ident."},
    {"sigint_owner", sigint_owner, METH_NOARGS,
     "Whether this thread is that one and no hold is on."},
    {"sigint_held", sigint_held, METH_NOARGS, "Whether SIGINT is held back now."},
    {"sigint_take", sigint_take, METH_NOARGS,
     "How many SIGINTs arrived since the hold or the last take."},
    {"sigint_release", sigint_release, METH_NOARGS,
     "Put SIGINT's action back; how many arrived while held."},
    {"fork_exec_params", rs_fork_exec_params, METH_NOARGS,
     "fork_exec's parameter names, in the order fork_exec_new wants positions."},
    {"fork_exec_new", rs_fork_exec_new, METH_VARARGS,
     "fork_exec_new(wrapped, slow, positions, wording, chdir_tag, report, first_memory_fd): "
     "a fork_exec object."},
    {"fork_exec_setup", rs_fork_exec_setup, METH_VARARGS,
     "fork_exec_setup(fork_exec, args, then): the call without its preexec_fn, converted, "
     "then spawned by then(spawn) with the setup it packs."},
    {"spawn_posix", rs_spawn_posix, METH_VARARGS,
     "spawn_posix(args[, conversion]): Popen._posix_spawn's positional call spawned "
     "(convert.c): (pid, *its six fds), or os.posix_spawn's exception."},
    {"spawn_request_fields", rs_spawn_request_fields, METH_NOARGS,
     "SpawnRequest's field names, in the order spawn_request reads them."},
    {"spawn_request", rs_spawn_request, METH_VARARGS,
     "spawn_request(request, then): a SpawnRequest converted, then spawned by then(spawn) "
     "(None: at once): (pid, pidfd)."},
    {"set_spawn_error", rs_set_spawn_error, METH_O,
     "set_spawn_error(make): make(err, step, pid, exec_index, flags, cwd, exec_list) "
     "gives a failed spawn's exception."},
    {"popen_init_new", rs_popen_init_new, METH_VARARGS,
     "popen_init_new(base, popen, prepare, layout, getsignal, raise_signal): "
     "the body of rdmaspawn.Popen.__init__ (popen_init.c)."},
    {"popen_init_method", rs_popen_init_method, METH_VARARGS,
     "popen_init_method(body, face, setup_keywords): rdmaspawn.Popen.__init__, "
     "the plain call in C, any other to face (popen_init.c)."},
    {"errpipe_calls", rs_errpipe_calls, METH_VARARGS,
     "errpipe_calls(pipes, os, first_fd, guard_mark): (pipe, read, close) of the "
     "error pipe kept in pipes (errpipe.c)."},
    {"held_fork", rs_held_fork, METH_VARARGS,
     "held_fork(f, decide, unheld): f() (os.fork), its child held until the guard has looked."},
    {NULL, NULL, 0, NULL},
};

/* Single-phase: the statics are the process's, like the cffi module's. */
static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rdmaspawn._native._capi",
    "csrc/python/'s builtins (see rdmaspawn/_native/capi.py).", -1, functions,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__capi(void)
{
    return PyModule_Create(&module);
}
