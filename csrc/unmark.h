/*
 * unmark.c: the fork repair's sweep of the marks made before it, and the
 * rule for memory the kernel or a driver marked for itself.
 */
#ifndef RS_UNMARK_H
#define RS_UNMARK_H

/* Take MADV_DONTFORK off every mapping of this process whose mark a fork()
 * child trips on (forkrisk's rule, unmark.c's table); the rest keep theirs.
 * The number of mappings un-marked, or -errno. Call with the repair's look
 * held (mapwalk.c's buffer is its). */
long rs_unmark_hazards(void);

#endif
