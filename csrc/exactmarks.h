/*
 * exactmarks.c: the marks the fork repair made itself (forkrepair.c adds and
 * forgets them; unmark.c and rs_repair_exact() ask).
 */
#ifndef RS_EXACTMARKS_H
#define RS_EXACTMARKS_H

/* A mark over [lo, hi) was made for the inner pages of one registration. */
void rs_exact_remember(unsigned long lo, unsigned long hi);

/* The marks inside [lo, hi) are gone (a deregistration). */
void rs_exact_forget(unsigned long lo, unsigned long hi);

#endif
