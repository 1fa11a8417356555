/*
 * Does a libibverbs instance mark registrations MADV_DONTFORK right now?
 *
 * ibv_is_fork_initialized() cannot say: IBV_FORK_UNNEEDED "takes precedence"
 * (its man page) and is answered whenever the kernel reports copy-on-fork,
 * even where fork protection is on and every registration is marked. rdma-core
 * 35-50 do exactly that with RDMAV_FORK_SAFE=1 or after ibv_fork_init() (seen
 * on a soft-RoCE device: 44.0 on Linux 6.1 answers "unneeded", the
 * registration is `dc` in smaps and fork() children crash). So ask the
 * library to mark a page of our own and look: ibv_dontfork_range() marks only
 * where fork protection is on (its mm_root), then ibv_dofork_range() undoes it.
 *
 * The one trace it leaves: where protection is off, libibverbs remembers that
 * a range went by (its too_late flag, the same as after any registration), so
 * a later ibv_fork_init() of a release that would mark anyway returns EINVAL
 * instead of starting to mark. Hence the probe runs only where the library's
 * own answer is "unneeded", never before rs_fork_init() would call
 * ibv_fork_init().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmaspawn.h"

typedef int (*range_fn)(void *, size_t);

/* From /proc/self/smaps: with addr, 1 if the mapping holding it is "dc"
 * (MADV_DONTFORK), 0 if not; with addr 0, 1 if any mapping that is not
 * device memory is. -1 if smaps cannot be read or addr is not mapped. */
static int smaps_dc(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    char line[8192];
    int at_start = 1, inside = 0, found = addr ? -1 : 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        int whole = n > 0 && line[n - 1] == '\n';
        unsigned long lo, hi;
        int path_at = 0;
        /* A mapping's first line ("lo-hi perms offset dev inode path"); the
         * rest of a long line, read by the next fgets, is not one. */
        if (at_start && sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) >= 2
                && path_at > 0) {
            /* Device memory (uverbs doorbells and queues) is marked by its
             * driver, not by libibverbs: rs_driver_mapping() is the rule. */
            char *nl = strchr(line + path_at, '\n');
            if (nl)
                *nl = 0;
            inside = addr ? addr >= lo && addr < hi : !rs_driver_mapping(line + path_at, 0);
        } else if (at_start && inside && strncmp(line, "VmFlags:", 8) == 0) {
            int dc = strstr(line, " dc") != NULL;
            if (addr) {
                found = dc;
                break;
            }
            if (dc) {
                found = 1;
                break;
            }
        }
        at_start = whole;
    }
    fclose(f);
    return found;
}

int rs_dontfork_anywhere(void)
{
    return smaps_dc(0);
}

int rs_verbs_marks(void *verbs)
{
    range_fn dontfork = (range_fn)dlsym(verbs, "ibv_dontfork_range");
    range_fn dofork = (range_fn)dlsym(verbs, "ibv_dofork_range");
    long page = sysconf(_SC_PAGESIZE);
    if (!dontfork || !dofork || page <= 0)
        return -1;
    /* The probe page sits between two inaccessible pages of its own: another
     * thread that forks while it is marked (a guarded fork, the doctor) sees
     * a buffer on pages of its own, which neither fork() nor a child that
     * execs touches (the rule in rdmaspawn/_host/forkrisk.py), not a mark
     * over memory next to malloc's. Alone, the kernel would merge it into a
     * neighbouring anonymous mapping and split it off again at the mark. */
    char *area = mmap(NULL, 3 * (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED)
        return -1;
    char *p = area + page;
    int marked = -1;
    if (mprotect(p, (size_t)page, PROT_READ | PROT_WRITE) == 0 && dontfork(p, (size_t)page) == 0) {
        marked = smaps_dc((uintptr_t)p);
        dofork(p, (size_t)page);
    }
    munmap(area, 3 * (size_t)page);
    return marked;
}
