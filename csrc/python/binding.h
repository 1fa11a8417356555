/*
 * What csrc/python/ adds for the Python binding only: the C fork_exec
 * (fork_exec.c), Popen._posix_spawn's call and the engine's request
 * (convert.c), Popen's __init__ (popen_init.c), the
 * SIGINT hold (sigint.c) and the rest, made builtins of the extension module
 * rdmaspawn._native._capi by functions.c.
 */
#ifndef RDMASPAWN_BINDING_H
#define RDMASPAWN_BINDING_H

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

#ifdef Py_PYTHON_H
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

/* The builtins functions.c lists, each as it is called from Python
 * (module, then its argument tuple, its one argument, or NULL); what each
 * takes is in its docstring there.
 *
 * fork_exec_params(): fork_exec's parameter names, in the order
 * fork_exec_new() wants their positions: a new tuple of str. */
PyObject *rs_fork_exec_params(PyObject *module, PyObject *unused);

/* fork_exec_new(wrapped, slow, positions, wording, chdir_tag, report,
 * first_memory_fd): a fork_exec object, the call converted (convert.c) and
 * spawned in C, one with a preexec_fn handed to slow(self, *args);
 * positions[i] is where the i-th name of fork_exec_params() sits in this
 * CPython's call (-1: absent), wording this CPython's messages (convert.h).
 * A failed child's report for an error pipe whose write end is
 * first_memory_fd or above goes to report(fd, data) (dropin/errpipe.py
 * keeps that pipe). */
PyObject *rs_fork_exec_new(PyObject *module, PyObject *args);

/* Whether obj is one of those fork_exec objects. */
int rs_is_fork_exec(PyObject *obj);

/* fork_exec_setup(op, args, setup_address): fork_exec's call through the
 * fork_exec object op, its preexec_fn left out, with the packed struct
 * rs_setup at setup_address (an int). */
PyObject *rs_fork_exec_setup(PyObject *module, PyObject *call);

/* errpipe_calls(pipes, os, first_fd, guard_mark): pipe(fork_exec), read(fd,
 * n) and close(fd) of the error pipe kept in memory, in the dict pipes
 * (read end -> what is unread), for numbers first_fd and up; below it,
 * os's own; pipe() makes a real one unless fork_exec (through wrappers that
 * carry the attribute guard_mark) is one of rdmaspawn's (errpipe.c): a new
 * tuple of three. */
PyObject *rs_errpipe_calls(PyObject *module, PyObject *args);

/* spawn_posix(call[, conversion]): Popen._posix_spawn's call (its positional
 * arguments) converted and spawned as os.posix_spawn would: (pid, the six
 * fds), or its exception; conversion is dropin/cpython.py's
 * PosixSpawn.conversion, kept for the calls without one (NotImplemented where
 * none was handed over, or the call is of another count) (convert.c). */
PyObject *rs_spawn_posix(PyObject *module, PyObject *args);

/* spawn_request_fields(): SpawnRequest's field names, in the order
 * spawn_request() reads them (convert.c): a new tuple of str. */
PyObject *rs_spawn_request_fields(PyObject *module, PyObject *unused);

/* spawn_request(request, setup_address): a SpawnRequest converted and
 * spawned, with the packed struct rs_setup at setup_address (an int; 0:
 * none): (pid, pidfd), or the SpawnError raised. */
PyObject *rs_spawn_request(PyObject *module, PyObject *args);

/* set_spawn_error(make): engine._spawn_error, set once: make(err, step,
 * pid, exec_index, flags, cwd, exec_list) gives a failed spawn's exception,
 * which rs_raise_spawn_error() raises (NULL). */
PyObject *rs_set_spawn_error(PyObject *module, PyObject *make);
struct rs_result;
PyObject *rs_raise_spawn_error(const struct rs_result *res, int flags, PyObject *cwd,
                               PyObject *exec_list);

/* n names as a new tuple of str: a C parameter list the binding compares
 * with its own. */
PyObject *rs_names_tuple(const char *const *names, int n);

/* popen_init_new(base, popen, prepare, layout, getsignal, raise_signal):
 * the body of rdmaspawn.Popen.__init__ (popen_init.c): base.__init__
 * (subprocess.Popen's) with SIGINT held back, for instances of popen itself
 * with the setup keywords at their defaults; prepare(self, *values) makes
 * any other call. layout: (npositional, kwonly_names, kwonly_defaults,
 * setup_defaults). */
PyObject *rs_popen_init_new(PyObject *module, PyObject *args);

/* popen_init_method(body, face, setup_keywords): rdmaspawn.Popen.__init__
 * (popen_init.c), a method descriptor: the plain call (an instance of
 * popen itself, naming none of setup_keywords) goes to base.__init__ under
 * the body's hold, any other to face, the Python function that calls body;
 * introspection gets face's answers. */
PyObject *rs_popen_init_method(PyObject *module, PyObject *args);

/* held_fork(fork, decide, unheld) for rdmaspawn.guard(): see heldfork.c. */
PyObject *rs_held_fork(PyObject *module, PyObject *args);
#endif

#endif
