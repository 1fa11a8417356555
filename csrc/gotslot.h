/*
 * gotslot.c: find and rewrite the pointer through which one loaded shared
 * object calls a function it imports (its GOT slot). Used by forkrepair.c.
 */
#ifndef RS_GOTSLOT_H
#define RS_GOTSLOT_H

#include <link.h>

/* The GOT slot of `lm` for the imported function `name` (a JUMP_SLOT or
 * GLOB_DAT relocation), or NULL where the object imports no such name. */
void **rs_slot_find(const struct link_map *lm, const char *name);

/* Store `value` in `slot` of `lm`, opening a RELRO page for the store only:
 * 0, or -errno (-ENOEXEC: the object's layout is not one we know). */
int rs_slot_write(const struct link_map *lm, void **slot, void *value);

#endif
