/*
 * mapwalk.c: this process's mappings, one at a time, from /proc/self/maps or
 * /proc/self/smaps, read with raw system calls into a static buffer. Used by
 * the fork repair (forkrepair.c, unmark.c) inside a fork()'s prepare handler,
 * where malloc and stdio may be mid-call.
 */
#ifndef RS_MAPWALK_H
#define RS_MAPWALK_H

struct rs_vma {
    unsigned long lo, hi;
    char perms[5];            /* "rw-p" */
    int dc, io, pf;           /* VmFlags (smaps only): DONTFORK, VM_IO, VM_PFNMAP */
    char path[4096 + 64];     /* "" for anonymous memory */
};

/* Call fn(vma, ctx) for each mapping of `file` ("/proc/self/maps" or
 * "/proc/self/smaps"), in address order, once its entry is whole; a non-zero
 * return of fn ends the walk and is returned. 0 at the end, -errno if the
 * file cannot be read. One walk at a time: the caller holds the repair's
 * look (forkrepair.c), which the buffer belongs to. */
long rs_map_walk(const char *file, long (*fn)(const struct rs_vma *, void *), void *ctx);

#endif
