/*
 * unmark.c: take MADV_DONTFORK off this process's memory, driver memory
 * excepted; and the rule for what driver memory is.
 */
#ifndef RS_UNMARK_H
#define RS_UNMARK_H

/* Un-mark every "dc" mapping of /proc/self/smaps that is not driver memory:
 * the number of mappings un-marked, or -errno (-EDEADLK: called from a signal
 * handler on a thread whose own sweep it interrupted). */
long rs_unmark_all(void);

#endif
