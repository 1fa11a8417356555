/*
 * Take MADV_DONTFORK off every mapping of this process that carries it,
 * except memory a driver marked for itself; and the one rule for what that
 * memory is.
 *
 * /proc/self/smaps is the only place the kernel shows the mark (VmFlags
 * "dc"). It is streamed through a static buffer with raw system calls: this
 * runs inside a fork()'s prepare handler, perhaps a fork from a signal
 * handler, where malloc and stdio may be mid-call. One sweep at a time; a
 * sweep that finds one already running on its own thread (a signal handler
 * that forked while the sweep it interrupted was under way) gives up rather
 * than wait for itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "arch.h"
#include "unmark.h"

#define RS_MEM_MAJOR 1  /* /dev/mem, /dev/zero, /dev/null: memory, not a driver's */

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

int rs_driver_mapping(const char *path, int io_or_pfnmap)
{
    struct stat st;
    if (io_or_pfnmap)
        return 1;  /* VM_IO / VM_PFNMAP: device memory, whatever file it came through */
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

/* The mapping being read: its range, its path and its flags. */
struct mapping {
    unsigned long lo, hi;
    char path[4096 + 64];
};

static long hex(const char **s)
{
    long v = 0;
    for (;; (*s)++) {
        char c = **s;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return v;
        v = v * 16 + d;
    }
}

/* "lo-hi perms offset dev inode   path" */
static void read_header(struct mapping *m, const char *line, const char *end)
{
    const char *s = line;
    int field = 0;
    m->lo = (unsigned long)hex(&s);
    s++;  /* '-' */
    m->hi = (unsigned long)hex(&s);
    for (; s < end && field < 4; field++) {  /* perms, offset, dev, inode */
        while (s < end && *s == ' ')
            s++;
        while (s < end && *s != ' ')
            s++;
    }
    while (s < end && *s == ' ')
        s++;
    size_t n = 0;
    while (s < end && n < sizeof m->path - 1)
        m->path[n++] = *s++;
    m->path[n] = 0;
}

static int has_flag(const char *line, const char *end, char a, char b)
{
    for (const char *s = line + 8; s + 1 < end; s++)  /* past "VmFlags:" */
        if (s[-1] == ' ' && s[0] == a && s[1] == b && (s + 2 == end || s[2] == ' '))
            return 1;
    return 0;
}

static int owner;  /* the thread id of the sweep under way, 0 when none */
static char text[1 << 16];
static struct mapping current;

static long sweep_locked(void)
{
    long fd = rs_sys4(SYS_openat, AT_FDCWD, (long)"/proc/self/smaps", O_RDONLY | O_CLOEXEC, 0);
    long have = 0, unmarked = 0, n;
    if (fd < 0)
        return fd;
    current.lo = current.hi = 0;
    for (;;) {
        do
            n = rs_sys3(SYS_read, fd, (long)(text + have), (long)(sizeof text - have));
        while (n == -EINTR);
        if (n < 0) {
            unmarked = n;
            break;
        }
        have += n;
        long start = 0;
        for (long i = 0; i < have; i++) {
            if (text[i] != '\n')
                continue;
            const char *line = text + start, *end = text + i;
            char c = line[0];
            if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) {
                read_header(&current, line, end);
            } else if (end - line > 8 && line[0] == 'V' && line[1] == 'm' && line[2] == 'F'
                       && current.hi > current.lo && has_flag(line, end, 'd', 'c')) {
                int io = has_flag(line, end, 'i', 'o') || has_flag(line, end, 'p', 'f');
                if (!rs_driver_mapping(current.path, io)
                        && rs_sys3(SYS_madvise, (long)current.lo, (long)(current.hi - current.lo),
                                   MADV_DOFORK) == 0)
                    unmarked++;
            }
            start = i + 1;
        }
        if (start == 0 && have == (long)sizeof text) {
            start = have;  /* a line longer than the buffer: no mapping line is */
        }
        for (long i = start; i < have; i++)
            text[i - start] = text[i];
        have -= start;
        if (n == 0)
            break;
    }
    rs_sys1(SYS_close, fd);
    return unmarked;
}

long rs_unmark_all(void)
{
    int me = (int)rs_sys1(SYS_gettid, 0), expected;
    for (;;) {
        expected = 0;
        if (__atomic_compare_exchange_n(&owner, &expected, me, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            break;
        if (expected == me)
            return -EDEADLK;  /* our own sweep, interrupted by a signal handler's fork */
        rs_sys1(SYS_sched_yield, 0);
    }
    long rc = sweep_locked();
    __atomic_store_n(&owner, 0, __ATOMIC_RELEASE);
    return rc;
}
