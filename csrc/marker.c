/*
 * Markers: while rdmaspawn holds a state in this process (patch() in force,
 * guard() on, the fork repair started), one page of a memfd named for it is
 * mapped: "rdmaspawn-patched", "rdmaspawn-guard-raise", "rdmaspawn-fork-repair".
 * Another process sees it in /proc/PID/maps as "/memfd:NAME (deleted)" with
 * no more access than reading the mappings needs (the doctor), without
 * ptrace or anything from the process itself. A fork() child, which has the
 * parent's state, inherits the page; exec, which drops the state, drops it.
 *
 * The page is never touched: it costs one mapping and no memory. Where it
 * cannot be made (no descriptor left for the memfd), the state holds all the
 * same and the doctor says "not protected": it errs only that way.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmaspawn.h"

static void *slots[RS_MARKER_SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int rs_marker_set(int slot, const char *name)
{
    long page = sysconf(_SC_PAGESIZE);
    void *fresh = NULL, *old;
    if (slot < 0 || slot >= RS_MARKER_SLOTS || page <= 0)
        return -EINVAL;
    if (name) {
        int fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0)
            return -errno;
        fresh = ftruncate(fd, page) == 0
            ? mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        int err = errno;
        close(fd);
        if (fresh == MAP_FAILED)
            return -err;
    }
    pthread_mutex_lock(&lock);
    old = slots[slot];
    slots[slot] = fresh;
    pthread_mutex_unlock(&lock);
    if (old)
        munmap(old, (size_t)page);
    return 0;
}
