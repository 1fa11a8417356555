/*
 * What a fork() left out of its child, measured from the kernel's own count.
 *
 * fork() gives the child no copy of a mapping marked MADV_DONTFORK (the
 * kernel's VM_DONTCOPY) and takes its pages off the child's total_vm, the
 * first field of /proc/PID/statm (dup_mmap(): vm_stat_account() with the
 * negated size, in every kernel since 2.6). So the parent's total_vm just
 * before the fork, less the child's, is the number of pages the child did
 * not get: no scan of /proc/PID/smaps, whose cost grows with every mapping
 * and every resident page (it walks the page tables), where statm costs the
 * same at 300 mappings as at 60,000.
 *
 * The count is only worth having before the child runs code that could touch
 * a missing page. So the fork handler of pthread_atfork() holds the child,
 * in glibc's fork() before it returns there and before CPython's after-fork
 * work, on a pipe, until the parent has read the child's statm and written
 * one byte; end of file instead (a refusal, or a parent that died) makes it
 * exit. The child side is raw system calls on its own stack: nothing it
 * touches can be a page it lacks, unless the stack itself was marked.
 *
 * End of file needs every copy of the write end closed, and a fork copies
 * every descriptor: a child forked on one thread while another thread's
 * pipe is open holds that pipe too, so with two held children and their
 * parent killed, each would keep the other's write end open, and neither
 * would ever exit. So every pipe end open here is listed (open_ends), and
 * the child of any fork closes all of them but its own read end before it
 * waits. The prepare handler takes the list's lock, so a fork never falls
 * between a pipe2() and its entry; the child gets the list complete.
 *
 * Only a fork on a thread that asked (rs_watch_begin) is held: for any other
 * fork in the process the handlers only keep open_ends (below) whole, and
 * they are registered once, as pthread_atfork() cannot take them back.
 * glibc holds its fork-handler lock from the prepare handlers to the
 * parent's or child's, so one fork's handlers never interleave with
 * another's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "arch.h"
#include "forkwatch.h"

static __thread struct rs_watch *watching;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static int handlers_rc;

/* Every pipe end of a watch open in this process (-1: a free slot), each
 * with the pid that opened it: a child made by a raw clone, which runs no
 * fork handler, keeps its parent's entries, and those name descriptors it
 * may have reused since. Guarded by ends_lock, which the prepare handler
 * holds until the parent's or the child's handler: a fork made with it
 * free could copy a pipe that has no entry yet. RS_WATCH_SLOTS pipes at a
 * time; a thread that finds none free is not held (rs_watch_begin fails,
 * and the guard looks before the fork instead). */
#define RS_WATCH_SLOTS 64
static struct {
    int fd;
    pid_t pid;
} open_ends[2 * RS_WATCH_SLOTS] = {[0 ... 2 * RS_WATCH_SLOTS - 1] = {-1, 0}};
static pthread_mutex_t ends_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t forking;  /* the process that ran the prepare handler */

/* Close a pipe end of this process's and take it off the list, both under
 * the lock: a fork between the two would copy it unlisted, or list a
 * number that means something else by then. */
static void close_end(int fd)
{
    pid_t self = (pid_t)rs_sys1(SYS_getpid, 0);
    pthread_mutex_lock(&ends_lock);
    for (int i = 0; i < 2 * RS_WATCH_SLOTS; i++)
        if (open_ends[i].fd == fd && open_ends[i].pid == self)
            open_ends[i].fd = -1;
    rs_sys1(SYS_close, fd);
    pthread_mutex_unlock(&ends_lock);
}

/* "/proc/<pid>/statm" into buf (32 bytes suffice); pid 0 is "self". */
static void statm_path(char *buf, pid_t pid)
{
    static const char head[] = "/proc/", tail[] = "/statm";
    char digits[16];
    int n = 0, at = 0;
    for (const char *s = head; *s; s++)
        buf[at++] = *s;
    if (pid == 0) {
        for (const char *s = "self"; *s; s++)
            buf[at++] = *s;
    } else {
        for (unsigned long v = (unsigned long)pid; v; v /= 10)
            digits[n++] = (char)('0' + v % 10);
        while (n)
            buf[at++] = digits[--n];
    }
    for (const char *s = tail; *s; s++)
        buf[at++] = *s;
    buf[at] = 0;
}

long rs_total_vm(pid_t pid)
{
    char path[32], text[64];
    long fd, n, pages = 0;
    statm_path(path, pid);
    fd = rs_sys4(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return fd;
    do
        n = rs_sys3(SYS_read, fd, (long)text, sizeof text - 1);
    while (n == -EINTR);
    rs_sys1(SYS_close, fd);
    if (n < 0)
        return n;
    for (long i = 0; i < n && text[i] >= '0' && text[i] <= '9'; i++)
        pages = pages * 10 + (text[i] - '0');
    return pages;
}

static void before_fork(void)
{
    struct rs_watch *w = watching;
    pthread_mutex_lock(&ends_lock);  /* every fork: see open_ends */
    forking = (pid_t)rs_sys1(SYS_getpid, 0);
    if (!w || w->forked)
        return;  /* not this thread's, or a second fork in one call */
    w->forked = 1;
    w->before = rs_total_vm(0);
}

static void in_parent(void)
{
    struct rs_watch *w = watching;
    pthread_mutex_unlock(&ends_lock);
    if (!w)
        return;
    watching = NULL;
    w->after = rs_total_vm(0);
}

/* In the child of any fork: close every watch's pipe ends but this
 * thread's read end (kept = -1: none), and start an empty list with a free
 * lock (the other threads it names do not exist here). Raw system calls
 * and plain stores only. */
static void close_others(int kept)
{
    for (int i = 0; i < 2 * RS_WATCH_SLOTS; i++) {
        if (open_ends[i].fd >= 0 && open_ends[i].fd != kept && open_ends[i].pid == forking)
            rs_sys1(SYS_close, open_ends[i].fd);
        open_ends[i].fd = -1;
    }
    ends_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

static void in_child(void)
{
    struct rs_watch *w = watching;
    char go = 0;
    long n;
    close_others(w ? w->go[0] : -1);  /* this thread's write end too */
    if (!w)
        return;
    watching = NULL;
    do
        n = rs_sys3(SYS_read, w->go[0], (long)&go, 1);
    while (n == -EINTR);
    rs_sys1(SYS_close, w->go[0]);
    if (n != 1)
        rs_sys1(SYS_exit_group, RS_WATCH_REFUSED);
}

static void register_handlers(void)
{
    handlers_rc = -pthread_atfork(before_fork, in_parent, in_child);
}

int rs_watch_begin(struct rs_watch *w)
{
    long rc = -EAGAIN;
    int slot[2], found = 0;
    pthread_once(&handlers_once, register_handlers);
    if (handlers_rc < 0)
        return handlers_rc;
    w->parent = (pid_t)rs_sys1(SYS_getpid, 0);
    pthread_mutex_lock(&ends_lock);
    for (int i = 0; i < 2 * RS_WATCH_SLOTS && found < 2; i++)
        if (open_ends[i].fd < 0 || open_ends[i].pid != w->parent)
            slot[found++] = i;  /* free, or a stale entry of a raw clone's parent */
    if (found == 2)
        rc = rs_sys2(SYS_pipe2, (long)w->go, O_CLOEXEC);
    if (rc == 0) {
        for (int end = 0; end < 2; end++) {
            open_ends[slot[end]].fd = w->go[end];
            open_ends[slot[end]].pid = w->parent;
        }
    }
    pthread_mutex_unlock(&ends_lock);
    if (rc < 0)
        return (int)rc;
    w->forked = 0;
    w->before = w->after = -1;
    watching = w;
    return 0;
}

int rs_watch_in_child(const struct rs_watch *w)
{
    return (pid_t)rs_sys1(SYS_getpid, 0) != w->parent;
}

void rs_watch_parent(struct rs_watch *w)
{
    watching = NULL;
    close_end(w->go[0]);
    if (!w->forked)
        close_end(w->go[1]);
}

void rs_watch_child(struct rs_watch *w)
{
    watching = NULL;
    if (!w->forked) {
        /* No fork handler ran (a raw clone): do what in_child() does, in a
         * process that has this one thread, so the lock (held, maybe, by a
         * thread that is not here) can be freed: close every listed pipe
         * end of the parent's, this watch's two among them. */
        forking = w->parent;
        close_others(-1);
    }
}

void rs_watch_release(struct rs_watch *w, int go)
{
    long n;
    if (go) {
        do
            n = rs_sys3(SYS_write, w->go[1], (long)"G", 1);
        while (n == -EINTR);
    }
    close_end(w->go[1]);
}
