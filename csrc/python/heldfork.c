/*
 * held_fork(fork, decide, unheld): what rdmaspawn.guard() makes of os.fork()
 * and os.forkpty(). It calls fork() (the function it was given, which forks
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
 * Where the child cannot be held (no descriptor left for the pipe, say),
 * unheld() looks before the fork instead (it raises to refuse) and fork()
 * runs unwatched: the guard never makes a fork fail that would have
 * succeeded. Whatever fork() returns that is not a pid (a test double's
 * None, 'abc' or -1) is returned as it is, as it would be unguarded.
 *
 * All of it in C so that no Python code (a signal handler's exception, say)
 * can run between the fork and the decision and leave the child held.
 */
#include "binding.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkwatch.h"

/* The pid in fork()'s result: os.fork()'s int or os.forkpty()'s (pid, fd);
 * -1, with no exception set, if it holds none. */
static long result_pid(PyObject *result)
{
    PyObject *pid = result;
    if (PyTuple_Check(result) && PyTuple_Size(result) >= 1)
        pid = PyTuple_GetItem(result, 0);
    if (!PyLong_Check(pid))
        return -1;
    long value = PyLong_AsLong(pid);
    if (value == -1 && PyErr_Occurred())
        PyErr_Clear();  /* out of range: no pid */
    return value < 0 ? -1 : value;
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

PyObject *rs_held_fork(PyObject *module, PyObject *args)
{
    PyObject *fork, *decide, *unheld;
    struct rs_watch w;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO:held_fork", &fork, &decide, &unheld))
        return NULL;
    if (rs_watch_begin(&w) < 0) {
        PyObject *looked = PyObject_CallObject(unheld, NULL);
        if (!looked)
            return NULL;
        Py_DECREF(looked);
        return PyObject_CallObject(fork, NULL);
    }
    PyObject *result = PyObject_CallObject(fork, NULL);
    if (rs_watch_in_child(&w)) {
        rs_watch_child(&w);
        return result;
    }
    rs_watch_parent(&w);
    if (!w.forked)
        return result;  /* it made no fork of glibc's: nothing was held */
    if (!result) {
        rs_watch_release(&w, 0);
        return NULL;
    }
    long pid = result_pid(result);
    long child = pid > 0 ? rs_total_vm((pid_t)pid) : -1;
    if (child > 0 && w.before == w.after && w.before == child) {
        rs_watch_release(&w, 1);
        return result;
    }
    /* -1: unknown (no pid to read, or its statm unreadable) */
    long left_out = child >= 0 && w.before >= 0 ? w.before - child : -1;
    PyObject *verdict = PyObject_CallFunction(decide, "ll", pid, left_out);
    if (!verdict) {
        if (pid > 0)
            discard(&w, (pid_t)pid, result);
        else
            rs_watch_release(&w, 0);  /* no pid to kill: end of file makes it exit */
        Py_DECREF(result);
        return NULL;
    }
    Py_DECREF(verdict);
    rs_watch_release(&w, 1);
    return result;
}
