/* setup.c: the child's declarative setup, in steps (setup.c says when and why). */
#ifndef RS_SETUP_H
#define RS_SETUP_H

#include "rdmaspawn.h"

long rs_setup_signals(const struct rs_setup *s, int *step);
long rs_setup_early(const struct rs_setup *s, int in_cgroup, int *step);
long rs_setup_late(const struct rs_setup *s, int *step);

#endif
