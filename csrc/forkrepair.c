/*
 * The fork repair: keep libibverbs' MADV_DONTFORK marks out of every fork()
 * on a kernel that copies DMA-pinned pages into the child.
 *
 * Since Linux 5.9 fork() gives the child its own copy of an anonymous page
 * that is pinned for DMA, instead of sharing it copy-on-write (hugetlb pages
 * followed), so the parent keeps the very page the device writes to and the
 * MADV_DONTFORK mark protects nothing; from 5.13 the kernel says so over RDMA
 * netlink. libibverbs of rdma-core 35-50 marks every registration all the
 * same once ibv_fork_init() ran (NCCL calls it; RDMAV_FORK_SAFE does), and a
 * mark rounded out to whole pages takes malloc's arena headers and Python's
 * objects out of every fork() child. The caller (rdmaspawn/_native/forkrepair.py)
 * asks the kernel first and starts this only where it answered yes.
 *
 * How, in three parts, each cheaper than a fork:
 *
 *   what                         when                      cost
 *   ---------------------------  ------------------------  --------------------------
 *   rewrite libibverbs' call     on start, and at the      one GOT slot per libibverbs
 *   to madvise (repair_madvise)  first fork after a        (gotslot.c); after that,
 *                                libibverbs is loaded      nothing: no mark is made
 *   un-mark what was marked      with each rewrite         one /proc/self/smaps read
 *   before (unmark.c)                                      (unmark.c), driver memory left
 *   look for a new libibverbs    every fork() of glibc's   a walk of the loader's list
 *                                (pthread_atfork prepare)  of objects, no lock taken
 *
 * repair_madvise() turns MADV_DONTFORK into MADV_DOFORK: same range, same
 * checks by the kernel, same answer to libibverbs, and a range that was
 * marked by anyone is un-marked. Where the kernel refuses that (EINVAL: a
 * VM_IO mapping in the range, where DOFORK is not allowed), it marks as asked:
 * driver memory keeps its mark. Every other call goes through unchanged.
 *
 * Because the mark is never made, a registration in another thread cannot
 * slip a mark in between a check and a fork; a deregistration (MADV_DOFORK)
 * was harmless before and is now. The marker mapping ("/memfd:rdmaspawn-fork-
 * repair") tells the doctor, from outside, that the repair is in force.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch.h"
#include "gotslot.h"
#include "rdmaspawn.h"
#include "unmark.h"

typedef int (*madvise_fn)(void *, size_t, int);

static int repairing;                  /* rs_repair_start() ran */
static madvise_fn next_madvise;        /* what libibverbs called before (libc's, or a hook's) */
static long rewritten, unmarked, sweeps, libraries;
static int looking;                    /* the thread id of the look under way, 0 if none */
static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static int start_rc;

static int repair_madvise(void *addr, size_t len, int advice)
{
    madvise_fn next = __atomic_load_n(&next_madvise, __ATOMIC_ACQUIRE);
    if (advice == MADV_DONTFORK && next(addr, len, MADV_DOFORK) == 0) {
        __atomic_add_fetch(&rewritten, 1, __ATOMIC_RELAXED);
        return 0;
    }
    return next(addr, len, advice);
}

/* libibverbs under any of its names: libibverbs.so.1, or a wheel's renamed
 * copy (auditwheel's libibverbs-<hash>.so.1...). */
static int is_verbs(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "libibverbs", 10) == 0 && (base[10] == '.' || base[10] == '-');
}

/* Point one libibverbs' madvise slot at repair_madvise: 1 if it was just
 * rewritten, 0 if it already was, -errno. */
static int rewrite(struct link_map *lm)
{
    void **slot = rs_slot_find(lm, "madvise");
    if (!slot)
        return -ENOENT;
    void *was = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (was == (void *)repair_madvise)
        return 0;
    /* Another hook may sit there (UCX's memory hooks rewrite madvise slots
     * too): it stays in the chain. */
    __atomic_store_n(&next_madvise, (madvise_fn)was, __ATOMIC_RELEASE);
    int rc = rs_slot_write(lm, slot, (void *)repair_madvise);
    if (rc == 0)
        __atomic_add_fetch(&libraries, 1, __ATOMIC_RELAXED);
    return rc < 0 ? rc : 1;
}

/* Rewrite every libibverbs the loader has, and sweep once where one was new.
 * The loader's list is read without its lock (a fork from a signal handler
 * must not take it), only while the loader says it is consistent: an object
 * still being loaded is found at the next fork, before it can have marked
 * anything. */
static int look(void)
{
    int fresh = 0, rc = 0, me = (int)rs_sys1(SYS_gettid, 0), expected;
    for (;;) {  /* one look at a time: another thread's is waited for, so that
                   this fork comes after its rewrite and its sweep */
        expected = 0;
        if (__atomic_compare_exchange_n(&looking, &expected, me, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            break;
        if (expected == me)
            return 0;  /* our own look, interrupted by a signal handler's fork */
        rs_sys1(SYS_sched_yield, 0);
    }
    if (__atomic_load_n(&_r_debug.r_state, __ATOMIC_ACQUIRE) == RT_CONSISTENT) {
        for (struct link_map *lm = _r_debug.r_map; lm; lm = lm->l_next) {
            if (!lm->l_name || !is_verbs(lm->l_name))
                continue;
            int r = rewrite(lm);
            if (r > 0)
                fresh = 1;
            else if (r < 0)
                rc = r;
        }
    }
    if (fresh) {
        long n = rs_unmark_all();
        __atomic_add_fetch(&sweeps, 1, __ATOMIC_RELAXED);
        if (n > 0)
            __atomic_add_fetch(&unmarked, n, __ATOMIC_RELAXED);
        else if (n < 0)
            rc = (int)n;
    }
    __atomic_store_n(&looking, 0, __ATOMIC_RELEASE);
    return rc;
}

static void before_fork(void)
{
    if (__atomic_load_n(&repairing, __ATOMIC_ACQUIRE))
        look();
}

static void start(void)
{
    start_rc = -pthread_atfork(before_fork, NULL, NULL);
    if (start_rc < 0)
        return;
    rs_marker_set(RS_MARKER_REPAIR, "rdmaspawn-fork-repair");  /* for the doctor */
    __atomic_store_n(&repairing, 1, __ATOMIC_RELEASE);
}

int rs_repair_start(void)
{
    pthread_once(&start_once, start);
    if (start_rc < 0)
        return start_rc;
    /* With a libibverbs loaded already, its marks so far go now, not at the
     * first fork; with none, the first one loaded is found at a fork. */
    int rc = look();
    return rc;
}

void rs_repair_stats(struct rs_repair_stats *out)
{
    out->active = __atomic_load_n(&repairing, __ATOMIC_ACQUIRE);
    out->libraries = __atomic_load_n(&libraries, __ATOMIC_RELAXED);
    out->rewritten = __atomic_load_n(&rewritten, __ATOMIC_RELAXED);
    out->unmarked = __atomic_load_n(&unmarked, __ATOMIC_RELAXED);
    out->sweeps = __atomic_load_n(&sweeps, __ATOMIC_RELAXED);
}
