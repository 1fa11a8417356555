/* What the parent hands the child, and what the child hands back. */
#ifndef RS_CHILD_H
#define RS_CHILD_H

#include <stdint.h>
#include "rdmaspawn.h"

struct rs_child {
    const struct rs_request *req;
    char *const *envp;          /* req->envp, or the parent's environ */
    uint64_t mask;              /* the parent thread's signal mask before the spawn */
    int handlers_cleared;       /* clone3 with CLONE_CLEAR_SIGHAND did it already */
    int report_fd;              /* -1, or where to write {err, step} (see spawn.c) */
    int in_cgroup;              /* clone3 placed it in req->setup's cgroup */
    /* Written by the child only, read by the parent only after the child has
     * exec'd or exited (CLONE_VFORK): no other synchronisation is needed. */
    int err;
    int step;
};

/* The child's whole life; runs on its own stack in the parent's memory. */
int rs_child_main(void *arg);

/* The declarative setup's steps (setup.c): 0, or a negative errno and *step. */
long rs_setup_signals(const struct rs_setup *s, int *step);
const uint64_t *rs_setup_mask(const struct rs_setup *s, const uint64_t *inherited);
long rs_setup_early(const struct rs_setup *s, int in_cgroup, int *step);
long rs_setup_late(const struct rs_setup *s, int *step);
const char *rs_setup_step_name(int step);   /* NULL: not a setup step */

#endif
