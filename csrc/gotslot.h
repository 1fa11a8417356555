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

/* Whether the loader is done relocating `lm` (its RELRO made read-only, or,
 * without RELRO, `slot` filled in): 1 or 0. Reads /proc/self/maps through
 * mapwalk.c: call with the repair's look held. */
int rs_slot_relocated(const struct link_map *lm, void **slot);

/* Store `value` in `slot` of `lm`, opening a RELRO page for the store only:
 * 0, or -errno (-ENOEXEC: the object's layout is not one we know). */
int rs_slot_write(const struct link_map *lm, void **slot, void *value);

#endif
