/*
 * A signal's disposition set with a raw system call, as the child must
 * (no libc wrapper, no errno): what child.c (the handlers reset before
 * exec) and setup.c (ignore_signals, default_signals) both do. Its own
 * header so that neither of them includes the other's.
 */
#ifndef RS_SIGDISP_H
#define RS_SIGDISP_H

#include <signal.h>
#include <stdint.h>
#include "arch.h"

/* The kernel's struct sigaction, which raw rt_sigaction takes (glibc's
 * differs: a 1024-bit mask). x86-64 and arm64 both have sa_restorer. */
struct rs_ksigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

/* handler is SIG_DFL or SIG_IGN: 0, or a negative errno. */
static inline long rs_set_disposition(int sig, void (*handler)(int))
{
    struct rs_ksigaction act = { handler, 0, 0, 0 };
    return rs_sys4(SYS_rt_sigaction, sig, (long)&act, 0, sizeof(uint64_t));
}

#endif
