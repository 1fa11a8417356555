/* What the parent hands the child, and what the child hands back. */
#ifndef RS_CHILD_H
#define RS_CHILD_H

#include <stddef.h>
#include <stdint.h>
#include "rdmaspawn.h"

/*
 * The child's stack. close_by_proc()'s 2 KiB dirent buffer is most of its
 * deepest use, and tests/c/engine_harness.c fails if a child uses more than
 * half of it (docs/benchmark.md has the figures). No recursion, no
 * variable-length array: the bound is static. Small, so that it fits where
 * address space is tight.
 */
#define RS_CHILD_STACK_SIZE (8 * 1024)

/* The child's verdict: errno and enum rs_step, both 0 if it reached exec,
 * and which exec_list entry the execve() error is about; spawn_id says
 * which spawn wrote it (a shared slot is reused). */
struct rs_report {
    int err;
    int step;
    int exec_index;
    uint64_t spawn_id;
};

struct rs_child {
    const struct rs_request *req;
    char *const *envp;          /* req->envp, or the parent's environ */
    uint64_t mask;              /* the parent thread's signal mask before the spawn */
    int handlers_cleared;       /* clone3 with CLONE_CLEAR_SIGHAND did it already */
    int in_cgroup;              /* clone3 placed it in req->setup's cgroup */
    /* Written by the child only, read by the parent only after the child has
     * exec'd or exited (CLONE_VFORK): no other synchronisation is needed.
     * shared (report.c; NULL if none) is written too, for where CLONE_VM is
     * emulated by a fork (spawn.c). */
    struct rs_report report;
    struct rs_report *shared;
    uint64_t spawn_id;          /* our pid and a count: unique to this spawn */
    /* Set by the child first thing, in our memory: seen by the parent only
     * where CLONE_VM really shares it, and then report is all there is (the
     * shared page is shared with our fork()ed children too). */
    int entered;
};

#ifdef RS_MEASURE_STACK
/* tests/c/engine_harness.c builds with this: the bytes of its stack that
 * the last child on a mapped stack touched (spawn.c fills it first), and
 * where that stack was. */
extern size_t rs_child_stack_used;
extern char *rs_child_stack_last;
#endif

/* report.c, parent side only: a slot for one spawn, and an id for it. */
#define RS_HIDDEN __attribute__((visibility("hidden")))
struct rs_report *rs_take_report_slot(void) RS_HIDDEN;
void rs_give_report_slot(struct rs_report *slot) RS_HIDDEN;
uint64_t rs_new_spawn_id(void) RS_HIDDEN;

/* The child's whole life; runs on its own stack in the parent's memory. */
int rs_child_main(void *arg);

#endif
