/*
 * forkwatch.c: one fork() on this thread, with its child held before it runs
 * any code of the program until the parent has looked at what the kernel
 * gave it. What rdmaspawn.guard() puts around os.fork() (python/heldfork.c).
 */
#ifndef RS_FORKWATCH_H
#define RS_FORKWATCH_H

#include <sys/types.h>

/* Exit status of a held child that was not let go (the parent refused the
 * fork, or died before deciding). */
#define RS_WATCH_REFUSED 127

struct rs_watch {
    int go[2];      /* a pipe: the parent writes one byte to let the child go;
                       end of file (the parent closed it, or died) makes the
                       child exit with RS_WATCH_REFUSED */
    int forked;     /* the prepare handler ran: a fork() is under way */
    long before;    /* the parent's total_vm in pages, just before the fork */
    long after;     /* the parent's total_vm, just after it */
    pid_t parent;   /* the process that began watching */
};

/* Watch the next fork() on this thread: 0, or -errno (no pipe, or
 * pthread_atfork() failed). */
int rs_watch_begin(struct rs_watch *w);

/* After the fork call returned, in the parent: stop watching and close the
 * child's end of the pipe. Where no fork happened, also the parent's end. */
void rs_watch_parent(struct rs_watch *w);

/* Whether this is a child of the watched fork (or of any fork since
 * rs_watch_begin(), a raw clone included): the pid is not the watcher's. */
int rs_watch_in_child(const struct rs_watch *w);

/* In the child, where the fork handler did not run (no fork of glibc's made
 * it): close both ends, and every other watch's pipe it was given. */
void rs_watch_child(struct rs_watch *w);

/* The parent's decision: go != 0 lets the child run on, 0 makes it exit.
 * Closes the parent's end; call once, after rs_watch_parent(). */
void rs_watch_release(struct rs_watch *w, int go);

/* total_vm of process pid (0: this one), in pages, from /proc/PID/statm; 0
 * for a process without memory (a zombie); -errno if it cannot be read. */
long rs_total_vm(pid_t pid);

#endif
