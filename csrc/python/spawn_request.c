/*
 * The engine's plain spawn request in C: rdmaspawn.spawn() with plain values.
 *
 * engine.spawn_packed() turns a SpawnRequest into rs_spawn_packed()'s flat
 * arguments in Python: two blobs, the lists, a result struct and a cffi call
 * of 26 arguments. That cost the parent 13-15 us per spawn (3.11), which
 * `rdmaspawn bench` shows as the engine's distance from the C floor (issue
 * 29, item 5). Here the plain request is converted with the GIL held, the
 * environ array copied while still holding it, and the GIL released for
 * rs_spawn() only, as fork_exec.c and posix_spawn.c do for their calls.
 *
 * "Plain" is: no declarative setup, groups, gid and uid None, argv,
 * exec_list and env (or None) exact lists or tuples of exact str or bytes
 * with no NUL (plain.c's), cwd None or such a string, every number an exact
 * int that fits a C int, close_in_child and pass_fds exact lists or tuples
 * of them, pgid None or such an int. Anything else answers None, never an
 * error: spawn_packed() sees the request afresh and raises what it raises.
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

/* SpawnRequest's fields (rdmaspawn/_native/request.py), in its order: the
 * binding compares them with rs_spawn_request_fields() and calls
 * rs_spawn_request_plain() only where they are the same. */
#define REQUEST_FIELDS(X) \
    X(F_ARGV, argv) X(F_EXEC_LIST, exec_list) X(F_ENV, env) X(F_CWD, cwd) \
    X(F_STDIN, stdin) X(F_STDOUT, stdout) X(F_STDERR, stderr) \
    X(F_CLOSE_IN_CHILD, close_in_child) X(F_PASS_FDS, pass_fds) X(F_FLAGS, flags) \
    X(F_CLOSE_METHOD, close_method) X(F_UMASK, umask) X(F_PGID, pgid) X(F_GROUPS, groups) \
    X(F_GID, gid) X(F_UID, uid) X(F_FAIL_STATUS, fail_status) X(F_SETUP, setup)

enum field { REQUEST_FIELDS(RS_X_ENUM) N_FIELDS };
static const char *const field_names[N_FIELDS] = { REQUEST_FIELDS(RS_X_NAME) };

PyObject *rs_spawn_request_fields(void)
{
    return rs_names_tuple(field_names, N_FIELDS);
}

/* n plain ints of an exact list or tuple into out[0..n-1], skipping skip. */
static int plain_ints(PyObject *seq, Py_ssize_t n, int *out, int *count, int skip)
{
    *count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = Py_TYPE(seq) == &PyList_Type ? PyList_GetItem(seq, i)
                                                       : PyTuple_GetItem(seq, i);
        int fd;
        if (!item || !rs_plain_int(item, &fd))
            return 0;
        if (fd != skip)
            out[(*count)++] = fd;
    }
    return 1;
}

#define NO_SKIP (-2)   /* below any fd and -1: plain_ints keeps everything */

/*
 * Fill the request from a plain SpawnRequest: 1, or 0 where anything is not
 * plain (an exception a conversion set is cleared by the caller).
 */
static int convert_plain(PyObject *q, struct rs_request *r, struct rs_held *h)
{
    PyObject *f[N_FIELDS];
    int flags, pgid = -1;

    for (int i = 0; i < N_FIELDS; i++)
        f[i] = PyTuple_GetItem(q, i);
    if (f[F_SETUP] != Py_None || f[F_GROUPS] != Py_None || f[F_GID] != Py_None
            || f[F_UID] != Py_None)
        return 0;
    if (!rs_plain_int(f[F_STDIN], &r->stdin_fd) || !rs_plain_int(f[F_STDOUT], &r->stdout_fd)
            || !rs_plain_int(f[F_STDERR], &r->stderr_fd) || !rs_plain_int(f[F_FLAGS], &flags)
            || !rs_plain_int(f[F_CLOSE_METHOD], &r->close_method)
            || !rs_plain_int(f[F_UMASK], &r->umask)
            || !rs_plain_int(f[F_FAIL_STATUS], &r->fail_status)
            || (f[F_PGID] != Py_None && !rs_plain_int(f[F_PGID], &pgid)))
        return 0;

    PyObject *env = f[F_ENV];
    Py_ssize_t argc = rs_plain_length(f[F_ARGV]), nexec = rs_plain_length(f[F_EXEC_LIST]);
    Py_ssize_t nenv = env == Py_None ? 0 : rs_plain_length(env);
    Py_ssize_t nclose = rs_plain_length(f[F_CLOSE_IN_CHILD]);
    Py_ssize_t nkeep = rs_plain_length(f[F_PASS_FDS]);
    if (argc < 0 || nexec < 0 || nenv < 0 || nclose < 0 || nkeep < 0)
        return 0;
    if (env == Py_None)
        nenv = rs_environ_count();

    /* One block: the argv, exec_list and envp pointer arrays, then the fds. */
    size_t slots = (size_t)argc + 1 + (size_t)nexec + 1 + (size_t)nenv + 1;
    char **ptrs = rs_held_block(h, slots * sizeof(char *)
                                   + (size_t)(nclose + nkeep) * sizeof(int));
    if (!ptrs)
        return 0;
    int *close_first = (int *)(ptrs + slots), *keep = close_first + nclose;
    char **envp = ptrs + argc + 1 + nexec + 1;
    /* The environ array is copied straight after it was counted (environ.c):
     * the conversions below allocate objects, and a GC pass they start could
     * run a finalizer that changes the environment. */
    if (env == Py_None)
        rs_environ_snapshot(envp, (int)nenv);
    if (!plain_ints(f[F_CLOSE_IN_CHILD], nclose, close_first, &r->n_close_first, -1)
            || !plain_ints(f[F_PASS_FDS], nkeep, keep, &r->n_keep_fds, NO_SKIP))
        return 0;
    if (!rs_plain_command(f[F_ARGV], argc, f[F_EXEC_LIST], nexec, env, nenv, f[F_CWD], ptrs,
                          r, h))
        return 0;
    r->close_first = close_first;
    r->keep_fds = keep;
    if (r->umask < 0)
        r->umask = -1;
    r->pgid = pgid >= 0 ? pgid : -1;
    rs_request_flags(r, flags);
    return 1;
}

PyObject *rs_spawn_request_plain(PyObject *request)
{
    struct rs_request r;
    struct rs_result res;
    struct rs_held h;

    if (!PyTuple_Check(request) || PyTuple_Size(request) != N_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "spawn_request_plain: not a SpawnRequest");
        return NULL;
    }
    rs_held_init(&h);
    memset(&r, 0, sizeof r);
    if (!convert_plain(request, &r, &h)) {
        PyErr_Clear();  /* a failed conversion: spawn_packed() meets it again */
        rs_held_release(&h);
        return none();
    }
    rs_spawn_held(&r, &res, &h);
    /* Item by item: no varargs format string (an abi3 build met a "y#" that
     * another version read differently). */
    const long values[5] = {res.pid, res.pidfd, res.err, res.step, res.exec_index};
    PyObject *out = PyTuple_New(5);
    for (int i = 0; out && i < 5; i++) {
        PyObject *v = PyLong_FromLong(values[i]);
        if (!v || PyTuple_SetItem(out, i, v) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}
