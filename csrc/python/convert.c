/*
 * The one conversion of a spawn request: Python values into
 * rs_spawn_packed()'s arguments, with the GIL held, each value converted as
 * the entry it came through converts it, raising CPython's exception in
 * CPython's order. One function per entry shape: rs_convert_fork_exec(),
 * rs_spawn_request() (the engine's SpawnRequest) and rs_spawn_posix()
 * (Popen._posix_spawn's call); the wording that differs between CPython
 * versions is rdmaspawn/dropin/cpython.py's, handed over once. One file, as
 * the entries share every converter and the storage, and CPython's order
 * of checks is best read in one place.
 */
#include "binding.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "rdmaspawn.h"
#include "convert.h"

/* CPython's MAX_GROUPS: NGROUPS_MAX of <limits.h> (Linux: 65536). */
#define MAX_GROUPS 65536

/* --- what a conversion holds ---------------------------------------------- */

void rs_conv_init(struct rs_conv *c)
{
    c->n_objects = 0;
    c->more = NULL;
    c->n_blocks = 0;
    c->used = 0;
    c->argv = c->exec_list = c->envp = NULL;
    c->cwd = NULL;
    c->keep_fds = c->close_first = NULL;
    c->n_keep_fds = c->n_close_first = 0;
    c->stdin_fd = c->stdout_fd = c->stderr_fd = -1;
    c->flags = 0;
    c->close_method = RS_CLOSE_AUTO;
    c->umask = c->pgid = -1;
    c->groups = NULL;
    c->ngroups = -1;
    c->gid = c->uid = -1;
    c->fail_status = RS_FAIL_STATUS_CPYTHON;
    c->setup = NULL;
}

void rs_conv_release(struct rs_conv *c)
{
    for (int i = 0; i < c->n_blocks; i++)
        PyMem_Free(c->blocks[i]);
    for (int i = 0; i < c->n_objects; i++)
        Py_DECREF(c->objects[i]);
    Py_XDECREF(c->more);
}

/* Keep obj alive until the spawn is over; the reference is stolen. */
static int keep(struct rs_conv *c, PyObject *obj)
{
    if (c->n_objects < RS_CONV_OBJECTS) {
        c->objects[c->n_objects++] = obj;
        return 1;
    }
    int ok = (c->more || (c->more = PyList_New(0))) && PyList_Append(c->more, obj) == 0;
    Py_DECREF(obj);
    return ok;
}

/* size bytes, pointer-aligned, valid until rs_conv_release(). */
static void *alloc(struct rs_conv *c, size_t size)
{
    size_t n = (size + sizeof(char *) - 1) / sizeof(char *);
    if (n <= RS_CONV_SLOTS - c->used) {
        void *p = c->slots + c->used;
        c->used += n;
        return p;
    }
    void *p = c->n_blocks < RS_CONV_BLOCKS ? PyMem_Malloc(size ? size : 1) : NULL;
    if (!p)
        return PyErr_NoMemory();
    return c->blocks[c->n_blocks++] = p;
}

void rs_conv_spawn(struct rs_conv *c, struct rs_result *res)
{
    Py_BEGIN_ALLOW_THREADS
    rs_spawn_packed(c->argv, c->exec_list, c->envp, c->cwd, c->keep_fds, c->n_keep_fds,
                    c->close_first, c->n_close_first, c->stdin_fd, c->stdout_fd, c->stderr_fd,
                    c->flags, c->close_method, c->umask, c->pgid, c->groups, c->ngroups,
                    c->gid, c->uid, c->fail_status, res, c->setup);
    Py_END_ALLOW_THREADS
    rs_conv_release(c);
}

struct deferred {
    struct rs_conv *c;      /* NULL once spawned */
    PyObject *(*finish)(struct rs_conv *c, void *ctx);
    void *ctx;
};

static PyObject *deferred_spawn(PyObject *capsule, PyObject *address)
{
    struct deferred *d = PyCapsule_GetContext(capsule);   /* NULL: then() has returned */
    void *setup = PyLong_AsVoidPtr(address);
    if (!setup && PyErr_Occurred())
        return NULL;
    if (!d || !d->c)
        return rs_fail(PyExc_RuntimeError, "rdmaspawn: a request is spawned once, in then()");
    struct rs_conv *c = d->c;
    d->c = NULL;
    c->setup = setup;
    return d->finish(c, d->ctx);
}

static PyMethodDef deferred_def = {"spawn", deferred_spawn, METH_O, NULL};

PyObject *rs_conv_then(struct rs_conv *c, int converted, PyObject *then,
                       PyObject *(*finish)(struct rs_conv *c, void *ctx), void *ctx)
{
    if (converted && (!then || then == Py_None))
        return finish(c, ctx);
    struct deferred d = {c, finish, ctx};
    PyObject *out = NULL, *go = NULL;
    PyObject *capsule = converted ? PyCapsule_New(&d, "rdmaspawn.deferred", NULL) : NULL;
    if (capsule && PyCapsule_SetContext(capsule, &d) == 0
            && (go = PyCFunction_New(&deferred_def, capsule)))
        out = PyObject_CallFunctionObjArgs(then, go, NULL);
    if (capsule)
        PyCapsule_SetContext(capsule, NULL);   /* d ends with this frame; go may not */
    Py_XDECREF(go);
    Py_XDECREF(capsule);
    if (d.c)
        rs_conv_release(c);
    return out;
}

/* --- values ---------------------------------------------------------------- */

static PyObject *type_name(PyObject *o)
{
    return PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__name__");
}

/* TypeError("<format's message>, not <type(o).__name__>"): 0. */
static int refuse_type(PyObject *o, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyObject *head = PyUnicode_FromFormatV(format, va);
    va_end(va);
    PyObject *name = head ? type_name(o) : NULL;
    if (name)
        PyErr_Format(PyExc_TypeError, "%U, not %U", head, name);
    Py_XDECREF(name);
    Py_XDECREF(head);
    return 0;
}

int rs_raise_formatted(PyObject *exc, PyObject *template, PyObject *kwargs, PyObject *arg)
{
    PyObject *format = PyObject_GetAttrString(template, "format");
    PyObject *args = format ? (arg ? PyTuple_Pack(1, arg) : PyTuple_New(0)) : NULL;
    PyObject *message = args ? PyObject_Call(format, args, kwargs) : NULL;
    if (message)
        PyErr_SetObject(exc, message);
    Py_XDECREF(message);
    Py_XDECREF(args);
    Py_XDECREF(format);
    return 0;
}

static int is_empty(PyObject *s)
{
    return PyUnicode_GetLength(s) == 0;
}

/* o as a C int the way the entry's int parser takes it (wording w). */
static int c_int(PyObject *o, PyObject *w, int *out)
{
    PyObject *index = NULL;
    int overflow;

    if (!PyLong_Check(o)) {   /* an int or a bool is read as it is, as the parsers read it */
        if (PyFloat_Check(o) && !is_empty(PyTuple_GetItem(w, W_FLOAT)))
            return rs_refuse(PyExc_TypeError, "%U", PyTuple_GetItem(w, W_FLOAT));
        if (!PyIndex_Check(o) && !is_empty(PyTuple_GetItem(w, W_NO_INDEX))) {
            PyObject *name = type_name(o);
            if (name)
                rs_raise_formatted(PyExc_TypeError, PyTuple_GetItem(w, W_NO_INDEX), NULL, name);
            Py_XDECREF(name);
            return 0;
        }
        if (!(index = PyNumber_Index(o)))
            return 0;
    }
    long v = PyLong_AsLongAndOverflow(index ? index : o, &overflow);   /* an int: no error */
    Py_XDECREF(index);
    if (!overflow && v >= INT_MIN && v <= INT_MAX) {
        *out = (int)v;
        return 1;
    }
    enum rs_wording which = W_INT_RANGE;
    if (is_empty(PyTuple_GetItem(w, W_INT_RANGE)))
        which = overflow ? W_LONG_RANGE : v > 0 ? W_INT_GREATER : W_INT_LESS;
    return rs_refuse(PyExc_OverflowError, "%U", PyTuple_GetItem(w, which));
}

/* A uid or gid as _Py_Uid_Converter / _Py_Gid_Converter take it; -1 (also
 * (uid_t)-1): leave it alone. */
static int id_value(PyObject *o, const char *what, long long *out)
{
    PyObject *index = NULL;
    int overflow;

    if (!PyFloat_Check(o))
        index = PyNumber_Index(o);
    if (!index) {
        PyErr_Clear();
        return refuse_type(o, "%s should be integer", what);
    }
    long v = PyLong_AsLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (!overflow && v == -1 && PyErr_Occurred())
        return 0;
    if (!overflow && (v == -1 || v == (long)UINT32_MAX)) {
        *out = -1;
        return 1;
    }
    if (!overflow && v >= 0 && v < (long)UINT32_MAX) {
        *out = v;
        return 1;
    }
    /* Beyond a C long: no uid_t either. Within one but not a uid_t: the
     * truncation check shares the negative case's label. */
    return rs_refuse(PyExc_OverflowError, overflow > 0 ? "%s is greater than maximum"
                                                    : "%s is less than minimum", what);
}

/* An fd or number of the engine's own request: an int (not a bool) that fits a C int. */
static int engine_int(PyObject *o, const char *what, int *out)
{
    if (!PyLong_Check(o) || PyBool_Check(o))
        return refuse_type(o, "%s must be an int", what);
    int overflow;
    long v = PyLong_AsLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred())
        return 0;
    if (overflow || v < INT_MIN || v > INT_MAX)
        return rs_refuse(PyExc_OverflowError, "%s out of range for a C int: %S", what, o);
    *out = (int)v;
    return 1;
}

/* One string: bytes with no NUL as they are (their sequence keeps them
 * alive), else PyUnicode_FSConverter's (str, bytes, os.PathLike); with
 * bytes_only, bytes alone, as fork_exec's executable list and env. */
static const char *string(struct rs_conv *c, PyObject *o, int bytes_only)
{
    char *s;
    PyObject *converted;

    if (PyBytes_CheckExact(o) || bytes_only)
        return PyBytes_AsStringAndSize(o, &s, NULL) < 0 ? NULL : s;  /* NUL: ValueError */
    if (!PyUnicode_FSConverter(o, &converted))
        return NULL;
    if (!keep(c, converted))
        return NULL;
    return PyBytes_AsString(converted);
}

/* seq as a tuple kept alive in c: a list is copied (another thread could
 * change it while the GIL is released for the spawn); anything else is
 * iterated (not_a_sequence: PySequence_Fast's refusal, as fork_exec's argv;
 * bytes_only: PySequence_Size first, as its byte lists). */
static PyObject *as_tuple(struct rs_conv *c, PyObject *seq, const char *not_a_sequence,
                          int bytes_only)
{
    PyObject *t;
    if (PyTuple_Check(seq)) {
        Py_INCREF(seq);
        t = seq;
    } else if (PyList_Check(seq)) {
        t = PyList_AsTuple(seq);
    } else if (not_a_sequence) {
        PyObject *fast = PySequence_Fast(seq, not_a_sequence);
        t = fast && PyList_Check(fast) ? PyList_AsTuple(fast) : fast;
        if (fast != t)
            Py_XDECREF(fast);
    } else {
        if (bytes_only && PySequence_Size(seq) < 0)
            return NULL;
        t = PySequence_Tuple(seq);
    }
    return t && keep(c, t) ? t : NULL;
}

/* seq's strings as a NULL-terminated array. */
static char **strings(struct rs_conv *c, PyObject *seq, const char *not_a_sequence,
                      int bytes_only)
{
    PyObject *t = as_tuple(c, seq, not_a_sequence, bytes_only);
    if (!t)
        return NULL;
    Py_ssize_t n = PyTuple_Size(t);
    char **out = alloc(c, ((size_t)n + 1) * sizeof(char *));
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(out[i] = (char *)string(c, PyTuple_GetItem(t, i), bytes_only)))
            return NULL;
    out[n] = NULL;
    return out;
}

/* The C environment for env=None: counted and copied (environ.c) with
 * nothing between them that could run Python code, which could change it. */
static char **environ_copy(struct rs_conv *c)
{
    int n = rs_environ_count();
    char **envp = alloc(c, ((size_t)n + 1) * sizeof(char *));
    if (envp)
        rs_environ_snapshot(envp, n);
    return envp;
}

/* An id of the engine's request: None, or an int in [0, UINT32_MAX]. */
static int engine_id(PyObject *o, const char *what, long long *out)
{
    int v;
    if (o == Py_None)
        return 1;
    if (!PyLong_Check(o) || PyBool_Check(o))
        return engine_int(o, what, &v);   /* its TypeError */
    long long value = PyLong_AsLongLong(o);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        value = -1;
    }
    if (value < 0 || value > (long long)UINT32_MAX)
        return rs_refuse(PyExc_ValueError, "%s out of range: %S", what, o);
    *out = value;
    return 1;
}

/* A list of gids: fork_exec's extra_groups (wording w) or the engine's
 * groups (w NULL: any sequence, engine_id()'s); (gid_t)-1 goes to the
 * kernel, which refuses it in the child (EINVAL), as with CPython. */
static int groups(struct rs_conv *c, PyObject *o, PyObject *w)
{
    if (w && !PyList_Check(o))
        return rs_refuse(PyExc_TypeError, "setgroups argument must be a list");
    if (w && PyList_Size(o) > MAX_GROUPS)
        return rs_refuse(PyExc_ValueError, "%U", PyTuple_GetItem(w, W_TOO_MANY_GROUPS));
    PyObject *t = as_tuple(c, o, NULL, 0);
    Py_ssize_t n = t ? PyTuple_Size(t) : 0;
    if (!t || !(c->groups = alloc(c, (size_t)n * sizeof(unsigned int) + 1)))
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(t, i);
        long long gid = -1;
        if (w && !PyLong_Check(item))
            return rs_refuse(PyExc_TypeError, "%U", PyTuple_GetItem(w, W_GROUP_TYPE));
        if (w && !id_value(item, "gid", &gid)) {
            PyErr_Clear();
            return rs_refuse(PyExc_ValueError, "invalid group id");
        }
        if (!w && !engine_id(item, "group", &gid))
            return 0;
        c->groups[i] = gid < 0 ? UINT32_MAX : (unsigned int)gid;
    }
    c->ngroups = (int)n;
    return 1;
}

/* A tuple of fds, skip left out: fork_exec's fds_to_keep (what NULL: ints
 * only, each refused in one ValueError) or one of the engine's lists (each
 * an engine_int() named what); ascending and non-negative where sorted
 * names the list (fds_to_keep; pass_fds, as engine.spawn() sorts them). */
static int fd_list(struct rs_conv *c, PyObject *t, const char *what, const char *sorted,
                   int skip, int **out, int *count)
{
    Py_ssize_t n = PyTuple_Size(t);
    int *fds = alloc(c, (size_t)n * sizeof(int));
    long prev = -1, fd;
    if (!fds)
        return 0;
    *count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(t, i);
        int overflow = 0, v = 0;
        if (what && !engine_int(item, what, &v))
            return 0;
        fd = what ? v : PyLong_Check(item) ? PyLong_AsLongAndOverflow(item, &overflow) : -1;
        if (sorted && (fd <= prev || overflow || fd > INT_MAX))
            return rs_refuse(PyExc_ValueError, "bad value(s) in %s", sorted);
        prev = fd;
        if (fd != skip)
            fds[(*count)++] = (int)fd;
    }
    *out = fds;
    return 1;
}

/* --- fork_exec's call -------------------------------------------------------- */

static PyObject *param(PyObject *args, const int *pos, enum rs_fork_exec_param p)
{
    return pos[p] < 0 ? NULL : PyTuple_GetItem(args, pos[p]);
}

static int truth(PyObject *o, int *out)
{
    return (*out = PyObject_IsTrue(o)) >= 0;
}

int rs_convert_fork_exec(PyObject *args, const int *pos, PyObject *w, int first_memory_fd,
                         struct rs_conv *c, int *errpipe_write)
{
    int fds[8], close_fds, restore, setsid, allow_vfork;
    int flags_as_int = !is_empty(PyTuple_GetItem(w, W_FLAGS_AS_INT));
    PyObject *keep_tuple = param(args, pos, P_FDS_TO_KEEP), *o;

    /* Parsed in the order of the parameters. */
    if (!truth(param(args, pos, P_CLOSE_FDS), &close_fds))
        return 0;
    if (!PyTuple_Check(keep_tuple))
        return refuse_type(keep_tuple, "fork_exec() argument %d must be tuple",
                           pos[P_FDS_TO_KEEP] + 1);
    for (int i = 0; i < 8; i++)   /* p2cread to errpipe_write, in this order */
        if (!c_int(PyTuple_GetItem(args, pos[P_P2CREAD + i]), w, &fds[i]))
            return 0;
    if (flags_as_int ? !c_int(param(args, pos, P_RESTORE_SIGNALS), w, &restore)
                       || !c_int(param(args, pos, P_CALL_SETSID), w, &setsid)
                     : !truth(param(args, pos, P_RESTORE_SIGNALS), &restore)
                       || !truth(param(args, pos, P_CALL_SETSID), &setsid))
        return 0;
    if (((o = param(args, pos, P_PGID_TO_SET)) && !c_int(o, w, &c->pgid))
            || !c_int(param(args, pos, P_CHILD_UMASK), w, &c->umask))
        return 0;
    if ((o = param(args, pos, P_ALLOW_VFORK)) && !truth(o, &allow_vfork))
        return 0;

    /* Then fork_exec's checks and conversions, in its order. */
    if (close_fds && fds[7] < 3)
        return rs_refuse(PyExc_ValueError, "errpipe_write must be >= 3");
    if (!fd_list(c, keep_tuple, NULL, "fds_to_keep", fds[7], &c->keep_fds, &c->n_keep_fds))
        return 0;
    if (!(c->exec_list = strings(c, param(args, pos, P_EXECUTABLE_LIST), NULL, 1)))
        return 0;
    o = param(args, pos, P_ARGS);
    if (!(c->argv = o == Py_None ? alloc(c, sizeof(char *))
                                 : strings(c, o, "argv must be a tuple", 0)))
        return 0;
    if (o == Py_None)
        c->argv[0] = NULL;
    o = param(args, pos, P_ENV);
    if (!(c->envp = o == Py_None ? environ_copy(c) : strings(c, o, NULL, 1)))
        return 0;
    if ((o = param(args, pos, P_CWD)) != Py_None && !(c->cwd = string(c, o, 0)))
        return 0;
    if ((o = param(args, pos, P_EXTRA_GROUPS)) != Py_None && !groups(c, o, w))
        return 0;
    if ((o = param(args, pos, P_GID)) != Py_None && !id_value(o, "gid", &c->gid))
        return 0;
    if ((o = param(args, pos, P_UID)) != Py_None && !id_value(o, "uid", &c->uid))
        return 0;

    /* The parent's ends of the pipes, closed first in the child; an error
     * pipe kept in memory has no fd to close. */
    if (!(c->close_first = alloc(c, 4 * sizeof(int))))
        return 0;
    const int parent_ends[4] = {fds[1], fds[2], fds[4], fds[6]};
    for (int i = 0; i < 4; i++)
        if (parent_ends[i] != -1 && parent_ends[i] < first_memory_fd)
            c->close_first[c->n_close_first++] = parent_ends[i];
    c->stdin_fd = fds[0];
    c->stdout_fd = fds[3];
    c->stderr_fd = fds[5];
    c->flags = (close_fds ? RS_F_CLOSE_FDS : 0) | (restore ? RS_F_RESTORE_SIGNALS : 0)
               | (setsid ? RS_F_SETSID : 0);
    *errpipe_write = fds[7];
    return 1;
}

/* --- the engine's SpawnRequest ---------------------------------------------- */

/* SpawnRequest's fields (rdmaspawn/_native/request.py), in its order. */
#define REQUEST_FIELDS(X) \
    X(F_ARGV, argv) X(F_EXEC_LIST, exec_list) X(F_ENV, env) X(F_CWD, cwd) \
    X(F_STDIN, stdin) X(F_STDOUT, stdout) X(F_STDERR, stderr) \
    X(F_CLOSE_IN_CHILD, close_in_child) X(F_PASS_FDS, pass_fds) X(F_FLAGS, flags) \
    X(F_CLOSE_METHOD, close_method) X(F_UMASK, umask) X(F_PGID, pgid) X(F_GROUPS, groups) \
    X(F_GID, gid) X(F_UID, uid) X(F_FAIL_STATUS, fail_status) X(F_SETUP, setup)

enum field { REQUEST_FIELDS(RS_X_ENUM) N_FIELDS };

PyObject *rs_names_tuple(const char *names)
{
    PyObject *s = PyUnicode_FromString(names);
    PyObject *list = s ? PyUnicode_Split(s, NULL, -1) : NULL;
    PyObject *out = list ? PyList_AsTuple(list) : NULL;
    Py_XDECREF(list);
    Py_XDECREF(s);
    return out;
}

PyObject *rs_spawn_request_fields(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return rs_names_tuple(REQUEST_FIELDS(RS_X_NAME));
}

static int convert_request(PyObject *q, struct rs_conv *c, PyObject **exec_list)
{
    PyObject *f[N_FIELDS], *t;
    int flags;

    for (int i = 0; i < N_FIELDS; i++)
        f[i] = PyTuple_GetItem(q, i);
    if (!(c->argv = strings(c, f[F_ARGV], NULL, 0))
            || !(*exec_list = as_tuple(c, f[F_EXEC_LIST], NULL, 0))
            || !(c->exec_list = strings(c, *exec_list, NULL, 0))
            || !(c->envp = f[F_ENV] == Py_None ? environ_copy(c) : strings(c, f[F_ENV], NULL, 0)))
        return 0;
    if (f[F_CWD] != Py_None && !(c->cwd = string(c, f[F_CWD], 0)))
        return 0;
    if (!engine_int(f[F_STDIN], "stdin", &c->stdin_fd)
            || !engine_int(f[F_STDOUT], "stdout", &c->stdout_fd)
            || !engine_int(f[F_STDERR], "stderr", &c->stderr_fd)
            || !(t = as_tuple(c, f[F_CLOSE_IN_CHILD], NULL, 0))
            || !fd_list(c, t, "fd", NULL, -1, &c->close_first, &c->n_close_first)
            || !(t = as_tuple(c, f[F_PASS_FDS], NULL, 0))
            || !fd_list(c, t, "pass_fds item", "pass_fds", -2, &c->keep_fds, &c->n_keep_fds)
            || !(PyBool_Check(f[F_FLAGS]) ? truth(f[F_FLAGS], &flags)   /* all of them False */
                                          : engine_int(f[F_FLAGS], "flags", &flags))
            || !engine_int(f[F_CLOSE_METHOD], "close_method", &c->close_method)
            || !engine_int(f[F_UMASK], "umask", &c->umask)
            || (f[F_PGID] != Py_None && !engine_int(f[F_PGID], "pgid", &c->pgid))
            || !engine_int(f[F_FAIL_STATUS], "fail_status", &c->fail_status))
        return 0;
    c->flags = flags;
    if (f[F_GROUPS] != Py_None && !groups(c, f[F_GROUPS], NULL))
        return 0;
    return engine_id(f[F_GID], "gid", &c->gid) && engine_id(f[F_UID], "uid", &c->uid);
}

/* exc (a new reference, or NULL with an exception set) raised: NULL. */
static PyObject *raise_made(PyObject *exc)
{
    if (exc)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(exc);
    return NULL;
}

/* engine._spawn_error (set once by engine.py): the SpawnError of a failure. */
static PyObject *spawn_error;

PyObject *rs_set_spawn_error(PyObject *module, PyObject *make)
{
    PyObject *old = spawn_error;
    (void)module;
    Py_INCREF(make);
    spawn_error = make;
    Py_XDECREF(old);
    return none();
}

PyObject *rs_raise_spawn_error(const struct rs_result *res, int flags, PyObject *cwd,
                               PyObject *exec_list)
{
    if (!spawn_error)
        return rs_fail(PyExc_RuntimeError, "rdmaspawn: no SpawnError maker set");
    return raise_made(PyObject_CallFunction(spawn_error, "iiiiiOO", res->err, res->step,
                                            res->pid, res->exec_index, flags, cwd, exec_list));
}

/* The converted request spawned: (pid, pidfd), or its SpawnError raised. */
static PyObject *request_spawned(struct rs_conv *c, void *request_and_exec_list)
{
    PyObject **q = request_and_exec_list;
    struct rs_result res;
    int flags = c->flags;
    PyObject *exec_list = q[1];   /* as converted: a failure's filename is one of its items */

    Py_INCREF(exec_list);
    rs_conv_spawn(c, &res);
    PyObject *out = NULL;
    if (res.err)
        rs_raise_spawn_error(&res, flags, PyTuple_GetItem(q[0], F_CWD), exec_list);
    else if ((out = PyTuple_New(2))) {   /* not Py_BuildValue: its format costs at every spawn */
        PyTuple_SetItem(out, 0, PyLong_FromLong(res.pid));
        PyTuple_SetItem(out, 1, PyLong_FromLong(res.pidfd));
        if (!PyTuple_GetItem(out, 0) || !PyTuple_GetItem(out, 1))
            Py_CLEAR(out);
    }
    Py_DECREF(exec_list);
    return out;
}

PyObject *rs_spawn_request(PyObject *module, PyObject *args)
{
    struct rs_conv c;
    PyObject *q[2] = {NULL, NULL}, *then;

    (void)module;
    if (!PyArg_UnpackTuple(args, "spawn_request", 2, 2, &q[0], &then))
        return NULL;
    if (!PyTuple_Check(q[0]) || PyTuple_Size(q[0]) != N_FIELDS)
        return rs_fail(PyExc_TypeError, "spawn_request: not a SpawnRequest");
    rs_conv_init(&c);
    return rs_conv_then(&c, convert_request(q[0], &c, &q[1]), then, request_spawned, q);
}

/* --- Popen._posix_spawn's call ------------------------------------------------- */

/* What the positions bytes hold, in this order (dropin/cpython.py's
 * PosixSpawn.conversion[0]): the call's length, then where each parameter sits
 * in it (NO_CLOSE_FDS: none, as before 3.13). */
enum at {
    AT_COUNT, AT_ARGS, AT_EXECUTABLE, AT_ENV, AT_RESTORE_SIGNALS, AT_CLOSE_FDS,
    AT_P2CREAD, AT_P2CWRITE, AT_C2PREAD, AT_C2PWRITE, AT_ERRREAD, AT_ERRWRITE, N_AT
};
#define NO_CLOSE_FDS 0xff

/* What the conversion tuple holds (PosixSpawn.conversion). */
enum spec {
    S_POSITIONS,    /* bytes: enum at */
    S_WORDING,      /* enum rs_wording's tuple: the file actions' "i" parser */
    S_STR_NUL,      /* os.posix_spawn's ValueError for a str path with a NUL */
    S_BYTES_NUL,    /* and for a bytes one */
    S_NO_MAPPING,   /* its TypeError for an env that is no mapping */
    S_OS,           /* os, whose environ env=None means; None: the C environ */
    N_SPEC
};

/* os.posix_spawn's path, converted as its path_t converter converts it. */
static const char *spawn_path(struct rs_conv *c, PyObject *o, PyObject *spec)
{
    char *s;
    Py_ssize_t n;

    if (!PyUnicode_Check(o) && !PyBytes_Check(o)) {
        PyObject *fspath = PyObject_HasAttrString((PyObject *)Py_TYPE(o), "__fspath__")
                           ? PyOS_FSPath(o) : NULL;
        if (!fspath) {
            if (!PyErr_Occurred())
                refuse_type(o, "posix_spawn: path should be string, bytes or os.PathLike");
            return NULL;
        }
        o = fspath;
    } else {
        Py_INCREF(o);
    }
    int is_str = PyUnicode_Check(o);
    PyObject *bytes = is_str ? PyUnicode_EncodeFSDefault(o) : o;
    if (is_str)
        Py_DECREF(o);
    if (!bytes || !keep(c, bytes) || PyBytes_AsStringAndSize(bytes, &s, &n) < 0)
        return NULL;
    if ((size_t)n != strlen(s))
        return rs_fail(PyExc_ValueError, "%U",
                       PyTuple_GetItem(spec, is_str ? S_STR_NUL : S_BYTES_NUL));
    return s;
}

/* env as os.posix_spawn's parse_envlist reads it: keys(), then values(). */
static char **environment(struct rs_conv *c, PyObject *env)
{
    Py_ssize_t n = PyMapping_Size(env);
    char **out = n < 0 ? NULL : alloc(c, ((size_t)n + 1) * sizeof(char *));
    PyObject *keys = out ? PyMapping_Keys(env) : NULL;
    PyObject *values = keys && keep(c, keys) ? PyMapping_Values(env) : NULL;
    if (!values || !keep(c, values))
        return NULL;
    if (!PyList_Check(keys) || !PyList_Check(values))
        return rs_fail(PyExc_TypeError, "env.keys() or env.values() is not a list");
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GetItem(keys, i), *value = PyList_GetItem(values, i);
        const char *k = key ? string(c, key, 0) : NULL;
        if (!k || !value)
            return NULL;
        if (!k[0] || strchr(k + 1, '='))
            return rs_fail(PyExc_ValueError, "illegal environment variable name");
        const char *v = string(c, value, 0);
        PyObject *pair = v ? PyBytes_FromFormat("%s=%s", k, v) : NULL;
        if (!pair || !keep(c, pair))
            return NULL;
        out[i] = PyBytes_AsString(pair);
    }
    out[n] = NULL;
    return out;
}

/* The call converted into c, in _posix_spawn's order, then os.posix_spawn's:
 * 1, or 0 with CPython's exception set. */
static int convert_posix_spawn(PyObject *call, const unsigned char *at, PyObject *spec,
                               struct rs_conv *c)
{
    /* _posix_spawn's file actions: the closes, then the dup2s to 0, 1, 2. */
    static const enum at action_fds[6] = {
        AT_P2CWRITE, AT_C2PREAD, AT_ERRREAD, AT_P2CREAD, AT_C2PWRITE, AT_ERRWRITE,
    };
    PyObject *w = PyTuple_GetItem(spec, S_WORDING), *os = PyTuple_GetItem(spec, S_OS);
    PyObject *env = PyTuple_GetItem(call, at[AT_ENV]), *minus_one = PyLong_FromLong(-1);
    int restore, close_fds = 0, taken[6], fds[6];

    /* _posix_spawn's own statements: env, restore_signals, the fds, close_fds. */
    if (!minus_one || (env == Py_None && os != Py_None
                       && !((env = PyObject_GetAttrString(os, "environ")) && keep(c, env)))) {
        Py_XDECREF(minus_one);
        return 0;
    }
    int ok = truth(PyTuple_GetItem(call, at[AT_RESTORE_SIGNALS]), &restore);
    for (int i = 0; ok && i < 6; i++)
        ok = (taken[i] = PyObject_RichCompareBool(PyTuple_GetItem(call, at[action_fds[i]]),
                                                  minus_one, Py_NE)) >= 0;
    Py_DECREF(minus_one);
    if (!ok || (at[AT_CLOSE_FDS] != NO_CLOSE_FDS
                && !truth(PyTuple_GetItem(call, at[AT_CLOSE_FDS]), &close_fds)))
        return 0;

    /* os.posix_spawn's, in its order. */
    PyObject *executable = PyTuple_GetItem(call, at[AT_EXECUTABLE]);
    PyObject *argv = PyTuple_GetItem(call, at[AT_ARGS]);
    if (!(c->exec_list = alloc(c, 2 * sizeof(char *)))
            || !(c->exec_list[0] = (char *)spawn_path(c, executable, spec)))
        return 0;
    c->exec_list[1] = NULL;
    if (!PyList_Check(argv) && !PyTuple_Check(argv))
        return rs_refuse(PyExc_TypeError, "posix_spawn: argv must be a tuple or list");
    if (PySequence_Size(argv) < 1)
        return rs_refuse(PyExc_ValueError, "posix_spawn: argv must not be empty");
    if (env != Py_None && !PyMapping_Check(env))
        return rs_refuse(PyExc_TypeError, "%U", PyTuple_GetItem(spec, S_NO_MAPPING));
    if (!(c->argv = strings(c, argv, NULL, 0)))
        return 0;
    if (!c->argv[0][0])
        return rs_refuse(PyExc_ValueError, "posix_spawn: argv first element cannot be empty");
    if (!(c->envp = env == Py_None ? environ_copy(c) : environment(c, env)))
        return 0;

    /* Each file action parsed ("i") and added: glibc refuses an fd outside
     * [0, the fd limit) with EBADF, before any child. */
    long limit = -1;
    if (!(c->close_first = alloc(c, 3 * sizeof(int))))
        return 0;
    for (int i = 0; i < 6; i++) {
        fds[i] = -1;
        if (!taken[i])
            continue;
        if (!c_int(PyTuple_GetItem(call, at[action_fds[i]]), w, &fds[i]))
            return 0;
        if (limit < 0)
            limit = sysconf(_SC_OPEN_MAX);
        if (fds[i] < 0 || fds[i] >= limit) {
            errno = EBADF;
            PyErr_SetFromErrno(PyExc_OSError);
            return 0;
        }
        if (i < 3)
            c->close_first[c->n_close_first++] = fds[i];
    }
    c->stdin_fd = fds[3];
    c->stdout_fd = fds[4];
    c->stderr_fd = fds[5];
    c->flags = (restore ? RS_F_RESTORE_SIGNALS : 0) | (close_fds ? RS_F_CLOSE_FDS : 0)
               | RS_F_REAP_ON_FAILURE;   /* posix_spawn leaves no child behind */
    return 1;
}

/* The positions bytes, each one inside a call of its count: NULL otherwise. */
static const unsigned char *positions_of(PyObject *spec)
{
    char *bytes;
    Py_ssize_t n;
    PyObject *positions = PyTuple_GetItem(spec, S_POSITIONS);

    if (!positions || !PyBytes_Check(positions)
            || PyBytes_AsStringAndSize(positions, &bytes, &n) < 0 || n != N_AT)
        return NULL;
    const unsigned char *at = (const unsigned char *)bytes;
    for (int i = AT_ARGS; i < N_AT; i++)
        if (at[i] >= at[AT_COUNT] && !(i == AT_CLOSE_FDS && at[i] == NO_CLOSE_FDS))
            return NULL;
    return at;
}

/* The conversion handed over by the last call that named one (the gate's:
 * one per process) and its checked positions, for the calls that do not. */
static PyObject *posix_spawn_spec;
static const unsigned char *posix_spawn_at;

PyObject *rs_spawn_posix(PyObject *module, PyObject *args)
{
    struct rs_conv c;
    struct rs_result res;
    PyObject *call, *spec = NULL;

    (void)module;
    if (!PyArg_UnpackTuple(args, "spawn_posix", 1, 2, &call, &spec))
        return NULL;
    const unsigned char *at = !spec ? posix_spawn_at
                              : PyTuple_Check(spec) && PyTuple_Size(spec) == N_SPEC
                              ? positions_of(spec) : NULL;
    int fits = at && PyTuple_Check(call) && PyTuple_Size(call) == at[AT_COUNT];
    if (!spec && !fits) {   /* none handed over yet, or another count */
        Py_INCREF(Py_NotImplemented);   /* not Py_RETURN_NOTIMPLEMENTED: see none() */
        return Py_NotImplemented;
    }
    if (!fits) {
        PyErr_Clear();
        return rs_fail(PyExc_TypeError, "spawn_posix: bad arguments");
    }
    if (spec) {
        PyObject *old = posix_spawn_spec;
        Py_INCREF(spec);
        posix_spawn_spec = spec;
        posix_spawn_at = at;
        Py_XDECREF(old);
    }
    spec = posix_spawn_spec;
    rs_conv_init(&c);
    if (!convert_posix_spawn(call, at, spec, &c)) {
        rs_conv_release(&c);
        return NULL;
    }
    rs_conv_spawn(&c, &res);
    if (!res.err) {
        PyObject *pid = PyLong_FromLong(res.pid), *out = pid ? PyTuple_Pack(
            7, pid, PyTuple_GetItem(call, at[AT_P2CREAD]), PyTuple_GetItem(call, at[AT_P2CWRITE]),
            PyTuple_GetItem(call, at[AT_C2PREAD]), PyTuple_GetItem(call, at[AT_C2PWRITE]),
            PyTuple_GetItem(call, at[AT_ERRREAD]), PyTuple_GetItem(call, at[AT_ERRWRITE])) : NULL;
        Py_XDECREF(pid);
        return out;
    }
    /* os.posix_spawn's OSError(errno, strerror, path), the subclass the
     * errno picks; built by hand, as PyErr_SetFromErrnoWithFilenameObject
     * runs signal handlers on EINTR. */
    PyObject *message = PyUnicode_DecodeLocale(strerror(res.err), "surrogateescape");
    PyObject *exc = message ? PyObject_CallFunction(PyExc_OSError, "iOO", res.err, message,
                                                    PyTuple_GetItem(call, at[AT_EXECUTABLE]))
                            : NULL;
    Py_XDECREF(message);
    return raise_made(exc);
}
