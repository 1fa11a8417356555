/*
 * exactmarks.c: the marks the fork repair made itself (forkrepair.c adds and
 * forgets them; unmark.c and rs_repair_exact() ask).
 */
#ifndef RS_EXACTMARKS_H
#define RS_EXACTMARKS_H

/* A mark over [lo, hi) is about to be made for the inner pages of one
 * registration: 0, or -1 where as many marks are alive as the bound allows
 * (then make none). */
int rs_exact_remember(unsigned long lo, unsigned long hi);

/* The mark over [lo, hi) was not made after all. */
void rs_exact_drop(unsigned long lo, unsigned long hi);

/* How many marks may be alive at once. */
long rs_exact_bound(void);

/* The marks inside [lo, hi) are gone (a deregistration). */
void rs_exact_forget(unsigned long lo, unsigned long hi);

#endif
