/*
 * The fork repair's sweep of marks made before it found a libibverbs: take
 * MADV_DONTFORK off where a fork() child trips on it, and nowhere else; and
 * the one rule for memory the kernel or a driver marked for itself.
 *
 * Which marks hurt a child is rdmaspawn/_host/forkrisk.py's rule, the one the
 * doctor and the guard use; this is that rule for this process, read with raw
 * calls (mapwalk.c) inside a fork()'s prepare handler:
 *
 *   marked mapping                                   risk     the sweep
 *   -----------------------------------------------  -------  -------------------
 *   the kernel's or a driver's (rs_driver_mapping)   none     keeps it
 *   anonymous, on pages of its own (no anonymous     none     keeps it
 *   neighbour, not a glibc thread heap, not a
 *   block malloc mapped)
 *   the repair's own exact marks (forkrepair.c)      none     keeps it
 *   anonymous memory bordering other memory, a       a hazard takes it off its
 *   block malloc mapped (its header)                          first and last page
 *   the brk heap, a stack, a glibc thread heap,      a hazard takes it off whole
 *   a file, shared memory, anything else
 *
 * Marking rounds a registration out to whole pages, so outside malloc's
 * heaps what a mark took from anyone else lies on its first and last page:
 * the rest of an anonymous mapping is one allocation's, the registered
 * buffer's (which a child never had under ibv_fork_init()), and stays
 * marked, so the kernel does not copy it into every child. Where two marks
 * met and merged, the page where they meet is not told apart and stays
 * marked. In malloc's heaps every page may hold another allocation's chunk
 * header, so there the mark goes whole, and on a kernel that copies pinned
 * pages at fork those registered pages are copied into each child until
 * they are deregistered. Marks made after the repair found libibverbs are
 * exact from the start (forkrepair.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "arch.h"
#include "exactmarks.h"
#include "mapwalk.h"
#include "rdmaspawn.h"
#include "unmark.h"

#define RS_MEM_MAJOR 1  /* /dev/mem, /dev/zero, /dev/null: memory, not a driver's */

/* glibc's HEAP_MAX_SIZE on 64-bit (malloc/arena.c): every thread heap is an
 * mmap() of this size at an address aligned to it, its heap_info first
 * (rdmaspawn/_host/glibcheap.py reads the same layout from outside). */
#define RS_HEAP_MAX (64UL << 20)

static int starts_with(const char *s, const char *head)
{
    for (; *head; s++, head++)
        if (*s != *head)
            return 0;
    return 1;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = 0, m = 0;
    while (s[n])
        n++;
    while (tail[m])
        m++;
    if (m > n)
        return 0;
    for (size_t i = 0; i < m; i++)
        if (s[n - m + i] != tail[i])
            return 0;
    return 1;
}

/* Where a program can hold its own data: anonymous memory (named or not),
 * the brk heap, a stack. Every other bracketed or prefixed name is the
 * kernel's ([vvar], [vdso], anon_inode:[perf_event], ...). */
static int program_memory_name(const char *path)
{
    return path[0] == 0 || starts_with(path, "[anon:") || starts_with(path, "[anon_shmem:")
           || starts_with(path, "[heap]") || starts_with(path, "[stack");
}

int rs_driver_mapping(const char *path, int io_or_pfnmap)
{
    struct stat st;
    if (io_or_pfnmap)
        return 1;  /* VM_IO / VM_PFNMAP: device memory, whatever file it came through */
    if (path[0] != '/')
        return !program_memory_name(path);
    if (!starts_with(path, "/dev/"))
        return 0;
    if (rs_sys4(SYS_newfstatat, AT_FDCWD, (long)path, (long)&st, 0) == 0)
        return S_ISBLK(st.st_mode) || (S_ISCHR(st.st_mode) && major(st.st_rdev) != RS_MEM_MAJOR);
    /* Not to be seen (gone, or another process's mount namespace): shared
     * anonymous memory ("/dev/zero (deleted)") and an unlinked file are memory
     * (a driver's device node does not vanish while mapped), and so is what
     * lives where distributions mount POSIX shared memory and hugetlbfs
     * (/dev/shm, /dev/hugepages, /dev/hugepages1G, ...); anything else under
     * /dev is left to the driver. */
    return !ends_with(path, " (deleted)") && !starts_with(path, "/dev/shm/")
           && !starts_with(path, "/dev/hugepages");
}

static int anonymous(const struct rs_vma *m)
{
    return m->path[0] == 0 || starts_with(m->path, "[anon:");
}

/* A neighbour a page of the marked mapping may have been taken from: it
 * touches, it is memory a program holds data in, and it is accessible (a
 * "---p" guard or reservation holds nothing). */
static int feeds(const struct rs_vma *x, unsigned long lo, unsigned long hi)
{
    return (x->hi == lo || x->lo == hi)
           && !(x->perms[0] == '-' && x->perms[1] == '-' && x->perms[2] == '-')
           && (anonymous(x) || starts_with(x->path, "[heap]"));
}

/* A glibc thread heap's first mapping: at a HEAP_MAX-aligned address, whole
 * or followed by more anonymous memory, with a heap_info as glibc writes it
 * (this process's own memory, read in place). */
static int thread_heap(const struct rs_vma *m, const struct rs_vma *next)
{
    const uintptr_t *info = (const uintptr_t *)m->lo;
    uintptr_t page = 4096, ar_ptr, prev, size, protect;
    if (m->lo % RS_HEAP_MAX || m->perms[0] != 'r')
        return 0;
    if (m->hi - m->lo < RS_HEAP_MAX && !(next && next->lo == m->hi && anonymous(next)))
        return 0;
    ar_ptr = info[0], prev = info[1], size = info[2], protect = info[3];
    if (!(0 < size && size <= protect && protect <= RS_HEAP_MAX) || size % page || protect % page)
        return 0;
    if (prev)
        return prev % RS_HEAP_MAX == 0 && prev != m->lo;
    return ar_ptr > m->lo && ar_ptr < m->lo + page;
}

/* A block glibc's malloc mapped for one allocation, whole: its chunk header
 * (prev_size 0, then the size with IS_MMAPPED) opens the mapping, and free()
 * in a child reads it. */
static int malloc_block(const struct rs_vma *m, unsigned long page)
{
    const uintptr_t *head = (const uintptr_t *)m->lo;
    uintptr_t size = head[1] & ~(uintptr_t)7;  /* whole pages (glibc 2.36), or not (2.43) */
    return m->perms[0] == 'r' && head[0] == 0 && (head[1] & 2) && size > 0
           && (size + page - 1) / page * page == m->hi - m->lo;
}

/* What the sweep does with a marked mapping. */
enum action { KEEP, EDGES, WHOLE };

static enum action action_for(const struct rs_vma *m, const struct rs_vma *prev,
                              const struct rs_vma *next, unsigned long page)
{
    if (rs_driver_mapping(m->path, m->io || m->pf) || rs_repair_exact(m->lo, m->hi))
        return KEEP;
    if (!anonymous(m))
        return WHOLE;
    if (thread_heap(m, next))
        return WHOLE;
    if ((prev && feeds(prev, m->lo, m->hi)) || (next && feeds(next, m->lo, m->hi))
            || malloc_block(m, page))
        return EDGES;
    return KEEP;
}

/* The walk's state: the mapping before the one awaiting its decision, and
 * that one (a marked mapping is decided once its next neighbour is known). */
struct sweep {
    struct rs_vma prev, held;
    int have_prev, holding;
    unsigned long page;
    long unmarked;
};

static long dofork(unsigned long lo, unsigned long hi)
{
    return rs_sys3(SYS_madvise, (long)lo, (long)(hi - lo), MADV_DOFORK);
}

static void decide(struct sweep *s, const struct rs_vma *next)
{
    const struct rs_vma *m = &s->held;
    unsigned long page = s->page;
    enum action a = action_for(m, s->have_prev ? &s->prev : NULL, next, page);
    if (a == KEEP)
        return;
    if (a == WHOLE || m->hi - m->lo <= 2 * page) {
        if (dofork(m->lo, m->hi) == 0)
            s->unmarked++;
    } else if (dofork(m->lo, m->lo + page) == 0 && dofork(m->hi - page, m->hi) == 0) {
        /* What is left is the inner pages of what was marked: the
         * repair's own from now on (the guard does not count them). */
        rs_exact_remember(m->lo + page, m->hi - page);
        s->unmarked++;
    }
}

static void copy_vma(struct rs_vma *to, const struct rs_vma *from)
{
    to->lo = from->lo, to->hi = from->hi, to->dc = from->dc, to->io = from->io, to->pf = from->pf;
    for (int i = 0; i < 5; i++)
        to->perms[i] = from->perms[i];
    unsigned long i = 0;
    for (; from->path[i] && i < sizeof to->path - 1; i++)
        to->path[i] = from->path[i];
    to->path[i] = 0;
}

static long step(const struct rs_vma *m, void *ctx)
{
    struct sweep *s = ctx;
    if (s->holding) {
        decide(s, m);
        copy_vma(&s->prev, &s->held);
        s->holding = 0;
        s->have_prev = 1;
    }
    if (m->dc) {
        copy_vma(&s->held, m);
        s->holding = 1;
    } else {
        copy_vma(&s->prev, m);
        s->have_prev = 1;
    }
    return 0;
}

static struct sweep state;

long rs_unmark_hazards(void)
{
    state.page = getauxval(AT_PAGESZ);  /* the loader's copy: no call into the kernel */
    state.have_prev = state.holding = 0;
    state.unmarked = 0;
    long rc = rs_map_walk("/proc/self/smaps", step, &state);
    if (state.holding)
        decide(&state, NULL);
    return rc < 0 ? rc : state.unmarked;
}
