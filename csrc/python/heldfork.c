/*
 * held_fork(fork, decide): what rdmaspawn.guard() makes of os.fork() and
 * os.forkpty(). It calls fork() (the function it was given, which forks
 * once), with the child held by forkwatch.c, and compares the parent's
 * total_vm from just before the fork with the held child's:
 *
 * - equal, and the parent's own unchanged across the fork: the child got
 *   every mapping, so there is nothing to look at. It is let go and the
 *   result returned; this is the cost of the guard for nearly every fork.
 * - otherwise (pages left out, or another thread mapped or unmapped memory
 *   while the fork ran): decide(pid, pages_left_out) looks at smaps, in
 *   Python, while the child is still held. If it returns, the child is let
 *   go; if it raises (a refusal, or a warning made an error), the child is
 *   killed before it ran a line of the program, reaped, a pty's fd closed,
 *   and the exception propagates: to the caller, no fork happened.
 *
 * All of it in C so that no Python code (a signal handler's exception, say)
 * can run between the fork and the decision and leave the child held.
 */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
#  define Py_LIMITED_API 0x03090000   /* see fork_exec.c */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "binding.h"
#include "forkwatch.h"

/* The pid in fork()'s result: os.fork()'s int or os.forkpty()'s (pid, fd).
 * -1 with an exception set if it is neither. */
static long result_pid(PyObject *result)
{
    PyObject *pid = result;
    if (PyTuple_Check(result) && PyTuple_Size(result) >= 1)
        pid = PyTuple_GetItem(result, 0);
    long value = PyLong_AsLong(pid);
    if (value < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_SystemError, "fork returned pid %ld", value);
    return value;
}

/* A refused child: killed while still held (a stopped one too), reaped. */
static void discard(struct rs_watch *w, pid_t pid, PyObject *result)
{
    int status;
    kill(pid, SIGKILL);
    rs_watch_release(w, 0);
    Py_BEGIN_ALLOW_THREADS
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    Py_END_ALLOW_THREADS
    if (PyTuple_Check(result) && PyTuple_Size(result) >= 2) {
        long fd = PyLong_AsLong(PyTuple_GetItem(result, 1));
        if (fd >= 0)
            close((int)fd);
    }
}

PyObject *rs_held_fork(PyObject *fork, PyObject *decide)
{
    struct rs_watch w;
    int rc = rs_watch_begin(&w);
    if (rc < 0) {
        errno = -rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *result = PyObject_CallObject(fork, NULL);
    if (!result) {
        rs_watch_parent(&w);
        if (w.forked)
            rs_watch_release(&w, 0);
        return NULL;
    }
    long pid = result_pid(result);
    if (pid == 0) {
        rs_watch_child(&w);
        return result;
    }
    rs_watch_parent(&w);
    if (!w.forked)
        return result;  /* it made no fork of glibc's: nothing was held */
    if (pid < 0) {
        rs_watch_release(&w, 0);
        Py_DECREF(result);
        return NULL;
    }
    long child = rs_total_vm((pid_t)pid);
    if (child > 0 && w.before == w.after && w.before == child) {
        rs_watch_release(&w, 1);
        return result;
    }
    long left_out = child >= 0 && w.before >= 0 ? w.before - child : -1;  /* -1: unknown */
    PyObject *verdict = PyObject_CallFunction(decide, "ll", pid, left_out);
    if (!verdict) {
        discard(&w, (pid_t)pid, result);
        Py_DECREF(result);
        return NULL;
    }
    Py_DECREF(verdict);
    rs_watch_release(&w, 1);
    return result;
}
