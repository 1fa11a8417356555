/*
 * setup.c: the child's declarative setup (struct rs_setup), in the steps
 * that child.c calls in order (see setup.c for the order and why).
 */
#ifndef RS_SETUP_H
#define RS_SETUP_H

#include <stdint.h>
#include "rdmaspawn.h"

/* Each step: 0, or a negative errno and *step. */
long rs_setup_signals(const struct rs_setup *s, int *step);
const uint64_t *rs_setup_mask(const struct rs_setup *s, const uint64_t *inherited);
long rs_setup_early(const struct rs_setup *s, int in_cgroup, int *step);
long rs_setup_late(const struct rs_setup *s, int *step);

#endif
