/*
 * plain.c: is a fork_exec argument a plain value, and its C form (with the
 * GIL held); the spawn that ends each plain call. Python-only, like its
 * users, fork_exec.c, posix_spawn.c and spawn_request.c.
 */
#ifndef RDMASPAWN_PLAIN_H
#define RDMASPAWN_PLAIN_H

/* The objects and pointer slots a usual spawn needs, held in the caller's
 * frame: an allocation and a free each, on every spawn, cost more than the
 * rest of the conversion (a list and a malloc'd block, before). */
#define RS_HELD_OBJECTS 8
#define RS_HELD_SLOTS 256

/* What the conversion made and must give back after the spawn. Set up with
 * rs_held_init(). */
struct rs_held {
    PyObject *objects[RS_HELD_OBJECTS];  /* the first objects the child's strings live in */
    int n_objects;
    PyObject *more;             /* a list of the others, or NULL */
    void *block;                /* the pointer arrays and fds: slots, or a PyMem block */
    char *slots[RS_HELD_SLOTS];
};

static inline void rs_held_init(struct rs_held *h)
{
    h->n_objects = 0;
    h->more = NULL;
    h->block = NULL;
}

/* Room for size bytes of pointer arrays and fds, pointer-aligned: h's slots
 * where they are enough, else a PyMem block; NULL when out of memory. */
void *rs_held_block(struct rs_held *h, size_t size);

/* Give back what h holds. */
void rs_held_release(struct rs_held *h);

/* An exact int that fits a C int. */
int rs_plain_int(PyObject *o, int *out);

/* True or False, as 1 or 0 (any other value is not plain). */
int rs_plain_flag(PyObject *o, int *out);

/* bytes, or str in the file system encoding, with no NUL inside: its chars,
 * or NULL. */
const char *rs_plain_string(PyObject *o, struct rs_held *h);

/* The n plain strings of an exact list or tuple into out[0..n-1], out[n] = NULL. */
int rs_plain_strings(PyObject *seq, Py_ssize_t n, char **out, struct rs_held *h);

/* The length of an exact list or tuple, else -1. */
Py_ssize_t rs_plain_length(PyObject *seq);

struct rs_request;
struct rs_result;

/* The command of a plain request into r: argv, exec_list and env as pointer
 * arrays in ptrs, back to back in that order (argc + 1, nexec + 1, nenv + 1
 * slots; env None: the environ array's copy is there already), and cwd
 * (None: stay). 1, or 0 where one of them is not plain. */
int rs_plain_command(PyObject *argv, Py_ssize_t argc, PyObject *exec_list, Py_ssize_t nexec,
                     PyObject *env, Py_ssize_t nenv, PyObject *cwd, char **ptrs,
                     struct rs_request *r, struct rs_held *h);

/* rs_spawn() of the converted request with the GIL released, then what h
 * holds given back: the end every plain call shares. */
void rs_spawn_held(const struct rs_request *r, struct rs_result *res, struct rs_held *h);

#endif
