/*
 * plain.c: is a fork_exec argument a plain value, and its C form (with the
 * GIL held). Python-only, like its users, fork_exec.c and posix_spawn.c.
 */
#ifndef RDMASPAWN_PLAIN_H
#define RDMASPAWN_PLAIN_H

/* What the conversion made and must give back after the spawn. */
struct rs_held {
    PyObject *owned;            /* list of what the child's strings live in, or NULL */
    void *block;                /* PyMem block: pointer arrays and fds */
};

/* Give back what h holds (both may be NULL). */
void rs_held_release(struct rs_held *h);

/* An exact int that fits a C int. */
int rs_plain_int(PyObject *o, int *out);

/* A bool or an exact int, as a truth value. */
int rs_plain_flag(PyObject *o, int *out);

/* bytes, or str in the file system encoding, with no NUL inside: its chars,
 * or NULL. */
const char *rs_plain_string(PyObject *o, struct rs_held *h);

/* The n plain strings of an exact list or tuple into out[0..n-1], out[n] = NULL. */
int rs_plain_strings(PyObject *seq, Py_ssize_t n, char **out, struct rs_held *h);

/* The length of an exact list or tuple, else -1. */
Py_ssize_t rs_plain_length(PyObject *seq);

#endif
