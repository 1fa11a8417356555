/*
 * The plain call of Popen._posix_spawn in C: Popen(argv) on CPython 3.13+.
 *
 * For a plain Popen(argv) CPython 3.13's _execute_child takes its posix_spawn
 * shortcut, and patch() puts dropin/posixspawn.py's posix_spawn_method there.
 * Checking the call, making the argv blob and calling the engine through
 * cffi with 26 arguments from Python cost the parent ~20,000 instructions per
 * spawn more than CPython's own os.posix_spawn path (callgrind; issue 29). So
 * the plain call is decided and spawned here, as fork_exec.c does it for
 * fork_exec: the checks and conversions with the GIL held, the environ array
 * copied while still holding it, the GIL released for rs_spawn() only.
 *
 * "Plain" is: the positional call _execute_child makes, env None, no fd to
 * redirect or close (all six -1), close_fds and restore_signals True or
 * False, argv an exact list or tuple of exact str or bytes (plain.c's), not
 * empty, its argv[0] not empty, the executable an exact str or bytes, no NUL
 * anywhere. Anything else answers None, never an error: posix_spawn_method's
 * general path sees the call afresh and raises os.posix_spawn's exceptions.
 * A failed spawn is os.posix_spawn's: OSError(errno, strerror, executable).
 */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
#  define Py_LIMITED_API 0x03090000   /* see fork_exec.c */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "rdmaspawn.h"
#include "binding.h"
#include "plain.h"

/* What the call's positions table holds, in this order (one byte each:
 * where the parameter sits in the call, self not counted; ABSENT: not a
 * parameter of this CPython's _posix_spawn, as close_fds before 3.13). */
enum at {
    AT_COUNT,                   /* the call's argument count */
    AT_ARGS, AT_EXECUTABLE, AT_ENV, AT_RESTORE_SIGNALS, AT_CLOSE_FDS,
    AT_FDS,                     /* p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite */
    N_AT = AT_FDS + 6
};
#define ABSENT 0xff

/*
 * Fill the request from a plain call: 1, or 0 where anything is not plain
 * (an exception a conversion set is cleared by the caller).
 */
static int convert_plain(PyObject *call, const unsigned char *at, struct rs_request *r,
                         const char **exec_list, struct rs_held *h)
{
    PyObject *argv = PyTuple_GetItem(call, at[AT_ARGS]);
    PyObject *executable = PyTuple_GetItem(call, at[AT_EXECUTABLE]);
    int restore, close_fds = 0, fd;

    if (PyTuple_GetItem(call, at[AT_ENV]) != Py_None)
        return 0;
    for (int i = AT_FDS; i < N_AT; i++)
        if (!rs_plain_int(PyTuple_GetItem(call, at[i]), &fd) || fd != -1)
            return 0;
    if (!rs_plain_flag(PyTuple_GetItem(call, at[AT_RESTORE_SIGNALS]), &restore)
            || (at[AT_CLOSE_FDS] != ABSENT
                && !rs_plain_flag(PyTuple_GetItem(call, at[AT_CLOSE_FDS]), &close_fds)))
        return 0;

    Py_ssize_t argc = rs_plain_length(argv);
    if (argc < 1 || !(exec_list[0] = rs_plain_string(executable, h)))
        return 0;   /* posix_spawn's "argv must not be empty", or not plain */
    exec_list[1] = NULL;

    /* One block: the envp and argv pointer arrays. The environ array is
     * counted and copied (environ.c) with nothing between them that could
     * run Python code: the strings' conversion allocates objects, and a GC
     * pass it starts could run a finalizer that changes the environment. */
    int nenv = rs_environ_count();
    char **envp = rs_held_block(h, ((size_t)nenv + 1 + (size_t)argc + 1) * sizeof(char *));
    if (!envp)
        return 0;
    char **ptrs = envp + nenv + 1;
    rs_environ_snapshot(envp, nenv);
    if (!rs_plain_strings(argv, argc, ptrs, h) || !ptrs[0][0])
        return 0;   /* "argv first element cannot be empty", or not plain */

    r->argv = ptrs;
    r->envp = envp;
    r->exec_list = (char *const *)exec_list;
    r->stdin_fd = r->stdout_fd = r->stderr_fd = -1;
    r->close_fds = close_fds;
    r->close_method = RS_CLOSE_AUTO;
    r->restore_signals = restore;
    r->umask = -1;
    r->pgid = -1;
    r->reap_on_failure = 1;     /* posix_spawn leaves no child behind */
    r->fail_status = RS_FAIL_STATUS_CPYTHON;
    return 1;
}

/* os.posix_spawn's error: OSError(errno, strerror(errno), executable), the
 * subclass the errno picks (FileNotFoundError, ...). Built by hand, not with
 * PyErr_SetFromErrnoWithFilenameObject, which runs signal handlers on EINTR. */
static PyObject *spawn_error(int err, PyObject *executable)
{
    PyObject *message = PyUnicode_DecodeLocale(strerror(err), "surrogateescape");
    if (!message)
        return NULL;
    PyObject *exc = PyObject_CallFunction(PyExc_OSError, "iOO", err, message, executable);
    Py_DECREF(message);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* The positions table as bytes of N_AT, each one inside a call of its count
 * (close_fds may be ABSENT): NULL otherwise. */
static const unsigned char *positions_of(PyObject *positions)
{
    char *bytes;
    Py_ssize_t n;

    if (!PyBytes_Check(positions) || PyBytes_AsStringAndSize(positions, &bytes, &n) < 0
            || n != N_AT)
        return NULL;
    const unsigned char *at = (const unsigned char *)bytes;
    for (int i = AT_ARGS; i < N_AT; i++)
        if (at[i] >= at[AT_COUNT] && !(i == AT_CLOSE_FDS && at[i] == ABSENT))
            return NULL;
    return at;
}

PyObject *rs_spawn_posix_plain(PyObject *call, PyObject *positions)
{
    struct rs_request r;
    struct rs_result res;
    struct rs_held h;
    const char *exec_list[2];
    const unsigned char *at = positions_of(positions);

    rs_held_init(&h);
    if (!at || !PyTuple_Check(call)) {
        PyErr_SetString(PyExc_TypeError, "spawn_posix_plain: bad arguments");
        return NULL;
    }
    memset(&r, 0, sizeof r);
    if (PyTuple_Size(call) != at[AT_COUNT] || !convert_plain(call, at, &r, exec_list, &h)) {
        PyErr_Clear();  /* a failed conversion: the general path meets it again */
        rs_held_release(&h);
        return none();
    }
    rs_spawn_held(&r, &res, &h);
    if (res.err)
        return spawn_error(res.err, PyTuple_GetItem(call, at[AT_EXECUTABLE]));
    return PyLong_FromLong(res.pid);
}
