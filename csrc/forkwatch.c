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
 * Only a fork on a thread that asked (rs_watch_begin) is held: the handlers
 * do nothing for any other fork in the process, and are registered once, as
 * pthread_atfork() cannot take them back. glibc holds its fork-handler lock
 * from the prepare handlers to the parent's or child's, so one fork's
 * handlers never interleave with another's.
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
    if (!w || w->forked)
        return;  /* not this thread's, or a second fork in one call */
    w->forked = 1;
    w->before = rs_total_vm(0);
}

static void in_parent(void)
{
    struct rs_watch *w = watching;
    if (!w)
        return;
    watching = NULL;
    w->after = rs_total_vm(0);
}

static void in_child(void)
{
    struct rs_watch *w = watching;
    char go = 0;
    long n;
    if (!w)
        return;
    watching = NULL;
    rs_sys1(SYS_close, w->go[1]);
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
    long rc;
    pthread_once(&handlers_once, register_handlers);
    if (handlers_rc < 0)
        return handlers_rc;
    rc = rs_sys2(SYS_pipe2, (long)w->go, O_CLOEXEC);
    if (rc < 0)
        return (int)rc;
    w->forked = 0;
    w->before = w->after = -1;
    w->parent = (pid_t)rs_sys1(SYS_getpid, 0);
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
    rs_sys1(SYS_close, w->go[0]);
    if (!w->forked)
        rs_sys1(SYS_close, w->go[1]);
}

void rs_watch_child(struct rs_watch *w)
{
    watching = NULL;
    if (!w->forked) {
        rs_sys1(SYS_close, w->go[0]);
        rs_sys1(SYS_close, w->go[1]);
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
    rs_sys1(SYS_close, w->go[1]);
}
