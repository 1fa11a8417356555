/*
 * The fork repair: keep libibverbs' MADV_DONTFORK marks off the pages a
 * fork() child needs, on a kernel that copies DMA-pinned pages into the child.
 *
 * Since Linux 5.9 fork() gives the child its own copy of an anonymous page
 * that is pinned for DMA, instead of sharing it copy-on-write (hugetlb pages
 * followed); from 5.13 the kernel says so over RDMA netlink. libibverbs of
 * rdma-core 35-50 marks every registration all the same once ibv_fork_init()
 * ran (NCCL calls it; RDMAV_FORK_SAFE does), rounded out to whole pages, and
 * the pages the rounding takes from others (malloc's chunk headers, Python's
 * objects) are then missing in every fork() child. The caller
 * (rdmaspawn/_native/forkrepair.py) asks the kernel first and starts this
 * only where it answered yes.
 *
 * What a child can need of a registration is its first and last page: the
 * ones it may share with other data. The pages wholly inside it hold the
 * registered buffer alone, which a child never had under ibv_fork_init() and
 * which the kernel would otherwise copy into every child. So:
 *
 *   what                          when                       cost
 *   ----------------------------  -------------------------  ----------------------
 *   libibverbs' madvise() slot    at the start, and at the   one GOT slot per
 *   points at repair_madvise:     first fork after a         libibverbs (gotslot.c)
 *   a mark covers the inner       libibverbs is loaded and
 *   pages only                    relocated
 *   marks made before are swept   with each new libibverbs   one /proc/self/smaps
 *   where a child trips on them                              read (unmark.c)
 *   look for a new libibverbs     every fork() of glibc's    a walk of the loader's
 *                                 (pthread_atfork prepare)   list, no lock taken
 *
 * A registration with fewer than RS_MARK_MIN_PAGES inner pages is not marked
 * at all: a mark splits its mapping in up to three, and at fork two more
 * mappings cost about as much as a copied page (docs/how-it-works.md: the
 * measurement). Nor is one made past the bound on marks alive
 * (exactmarks.c), which keeps the mappings the marks add bounded. Marks
 * other code makes, deregistrations (MADV_DOFORK) and
 * every other advice go through unchanged; the kernel's and the drivers' own
 * marks are never touched (unmark.c).
 *
 * The marker mapping ("/memfd:rdmaspawn-fork-repair") tells the doctor, from
 * outside, that the repair is in force.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch.h"
#include "exactmarks.h"
#include "gotslot.h"
#include "rdmaspawn.h"
#include "unmark.h"

/* The inner pages below which a registration is left unmarked. */
#define RS_MARK_MIN_PAGES 2

typedef int (*madvise_fn)(void *, size_t, int);

static int repairing;                  /* rs_repair_start() ran */
static madvise_fn next_madvise;        /* what libibverbs called before (libc's, or a hook's) */
static unsigned long page;
static long rewritten, unmarked, small, bounded, sweeps, libraries;
static int looking;                    /* the thread id of the look under way, 0 if none */
static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static int start_rc;

/* The slots rewritten, with what each held before: a slot found holding
 * something else since is another hook that calls ours (another copy of this
 * core, a memory tracer), left alone so that no two hooks call each other in
 * a circle; one holding its old value again is a libibverbs loaded anew. */
#define RS_SLOTS 16
static struct { void **slot; void *was; } slots[RS_SLOTS];

/* Threads inside next_madvise now: a hook that, through a chain rebuilt by
 * someone else, calls back into ours on the same thread is given the kernel
 * directly instead of going round again. */
#define RS_CALLERS 64
static int callers[RS_CALLERS];

static int set_errno(long rc)
{
    if (rc < 0) {
        errno = (int)-rc;
        return -1;
    }
    return 0;
}

static int call_next(void *addr, size_t len, int advice)
{
    int me = (int)rs_sys1(SYS_gettid, 0), at = -1;
    for (int i = 0; i < RS_CALLERS; i++)
        if (__atomic_load_n(&callers[i], __ATOMIC_ACQUIRE) == me)
            return set_errno(rs_sys3(SYS_madvise, (long)addr, (long)len, advice));
    for (int i = 0; i < RS_CALLERS && at < 0; i++) {
        int free_slot = 0;
        if (__atomic_compare_exchange_n(&callers[i], &free_slot, me, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            at = i;
    }
    int rc = __atomic_load_n(&next_madvise, __ATOMIC_ACQUIRE)(addr, len, advice);
    if (at >= 0)
        __atomic_store_n(&callers[at], 0, __ATOMIC_RELEASE);
    return rc;
}

/* libibverbs' madvise(). Its DONTFORK ranges are page-rounded registrations
 * (or the parts of one that were not marked yet), so the range less its first
 * and last page lies wholly inside the registration. */
static int repair_madvise(void *addr, size_t len, int advice)
{
    if (advice == MADV_DOFORK)
        rs_exact_forget((unsigned long)addr, (unsigned long)addr + len);
    if (advice != MADV_DONTFORK)
        return call_next(addr, len, advice);
    __atomic_add_fetch(&rewritten, 1, __ATOMIC_RELAXED);
    unsigned long lo = (unsigned long)addr, hi = lo + len;
    /* The answer libibverbs would have had: the range must be mapped. */
    long rc = rs_sys3(SYS_msync, (long)lo, (long)len, MS_ASYNC);
    if (rc < 0)
        return set_errno(rc);
    if (len < (2 + RS_MARK_MIN_PAGES) * page) {
        __atomic_add_fetch(&small, 1, __ATOMIC_RELAXED);
        return 0;
    }
    unsigned long in_lo = lo + page, in_hi = hi - page;
    if (rs_exact_remember(in_lo, in_hi) < 0) {
        __atomic_add_fetch(&bounded, 1, __ATOMIC_RELAXED);
        return 0;
    }
    rc = rs_sys3(SYS_madvise, (long)in_lo, (long)(in_hi - in_lo), MADV_DONTFORK);
    if (rc < 0)
        rs_exact_drop(in_lo, in_hi);
    if (rc == -EINVAL)  /* hugetlb: no mark on part of a huge page; the mark as asked */
        rc = rs_sys3(SYS_madvise, (long)lo, (long)len, MADV_DONTFORK);
    return set_errno(rc);
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
 * rewritten, 0 if it is ours (or a hook's over ours) already or the loader is
 * not done with it, -errno. */
static int rewrite(struct link_map *lm)
{
    void **slot = rs_slot_find(lm, "madvise");
    if (!slot)
        return -ENOENT;
    void *was = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (was == (void *)repair_madvise)
        return 0;
    int i = 0;
    while (i < RS_SLOTS && slots[i].slot && slots[i].slot != slot)
        i++;
    if (i < RS_SLOTS && slots[i].slot == slot && slots[i].was != was)
        return 0;  /* a hook that calls ours sits there */
    if (!rs_slot_relocated(lm, slot))
        return 0;  /* still being loaded: the next fork looks again */
    /* Another hook may sit there (UCX's memory hooks rewrite madvise slots
     * too): it stays in the chain. The first one found is the chain for all. */
    madvise_fn none = NULL;
    __atomic_compare_exchange_n(&next_madvise, &none, (madvise_fn)was, 0,
                                __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    int rc = rs_slot_write(lm, slot, (void *)repair_madvise);
    if (rc < 0)
        return rc;
    if (i < RS_SLOTS && !slots[i].slot) {
        slots[i].was = was;
        __atomic_store_n(&slots[i].slot, slot, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&libraries, 1, __ATOMIC_RELAXED);
    return 1;
}

/* Take the look. A holder that is no thread of this process is a fork
 * child's copy of its parent's look (the fork came while another thread
 * looked) or a thread that is gone: taken over. 1: taken; 0: this thread's own
 * look, interrupted by a signal handler's fork. */
static int take_look(void)
{
    int me = (int)rs_sys1(SYS_gettid, 0), pid = (int)rs_sys1(SYS_getpid, 0), holder;
    for (;;) {
        holder = 0;
        if (__atomic_compare_exchange_n(&looking, &holder, me, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 1;
        if (holder == me)
            return 0;
        if (rs_sys3(SYS_tgkill, pid, holder, 0) == -ESRCH
                && __atomic_compare_exchange_n(&looking, &holder, me, 0,
                                               __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 1;
        rs_sys1(SYS_sched_yield, 0);
    }
}

/* Rewrite every libibverbs the loader has, and sweep once where one was new.
 * The loader's list is read without its lock: a fork from a signal handler
 * must not take it, and with the walk under it (dl_iterate_phdr) a fork
 * child under glibc 2.43 waited for ever at its own next fork. It is read only while glibc says no load or unload is under way
 * (r_state), and an object mapped but not relocated yet is left to the next
 * fork (rs_slot_relocated). A dlclose() of a libibverbs that starts during
 * the walk is not guarded against (docs/how-it-works.md, Limits). */
static int look(void)
{
    int fresh = 0, rc = 0;
    if (!take_look())
        return 0;
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
        long n = rs_unmark_hazards();
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
    page = getauxval(AT_PAGESZ);
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
    /* With a libibverbs loaded already, its marks so far are swept now, not at
     * the first fork; with none, the first one loaded is found at a fork. */
    return look();
}

void rs_repair_stats(struct rs_repair_stats *out)
{
    out->active = __atomic_load_n(&repairing, __ATOMIC_ACQUIRE);
    out->libraries = __atomic_load_n(&libraries, __ATOMIC_RELAXED);
    out->rewritten = __atomic_load_n(&rewritten, __ATOMIC_RELAXED);
    out->unmarked = __atomic_load_n(&unmarked, __ATOMIC_RELAXED);
    out->sweeps = __atomic_load_n(&sweeps, __ATOMIC_RELAXED);
    out->small = __atomic_load_n(&small, __ATOMIC_RELAXED);
    out->bounded = __atomic_load_n(&bounded, __ATOMIC_RELAXED);
    out->mark_min = (long)(RS_MARK_MIN_PAGES * page);
    out->mark_bound = rs_exact_bound();
}
