/*
 * SIGINT held back while rdmaspawn.Popen builds a child (dropin/interrupts.py
 * says why): for the hold, the kernel's SIGINT action is swapped for a
 * handler that only counts, and the program's action is put back whole
 * afterwards, one sigaction() each way. Python's own handler table is never
 * touched, so signal.getsignal() tells the truth throughout, and a C
 * library's handler under Python's is kept and gets the signal on release.
 *
 * A program that changes SIGINT's action during the hold (signal.signal()
 * from another signal's handler, say) wins: the release finds the counter
 * gone and puts the program's action back. signal.siginterrupt() during the
 * hold rewrites the counter's flags instead: the counter carries the
 * program's SA_RESTART, so that a change of it shows, and is carried over.
 *
 * One hold at a time in the process: Python holds only in the main thread,
 * with the GIL, so a second one is nested (a Popen from a signal handler
 * that ran meanwhile) and holds nothing. The flag here, not a value handed
 * to Python, says whether a hold is on: an exception raised between the
 * hold and the caller's receipt of its result cannot leave it on. A process
 * fork()ed during a hold (by another thread, or by code Popen() runs) gets
 * the program's action back at once: no one in it would ever release the
 * hold.
 */
#include "binding.h"

#include <pthread.h>
#include <signal.h>

static volatile sig_atomic_t held;
static unsigned long arrived;        /* written by the counter, any thread */
static struct sigaction program;     /* SIGINT's action before the hold */

static void count(int sig)
{
    (void)sig;
    __atomic_fetch_add(&arrived, 1, __ATOMIC_RELAXED);
}

static void forked_child(void)
{
    if (held) {
        sigaction(SIGINT, &program, NULL);
        held = 0;
    }
}

int rs_sigint_held(void)
{
    return held;
}

/* The thread that runs Python's signal handlers, as pthread_self() (what
 * CPython's thread idents are on Linux): set by the binding at import and
 * after os.fork(). */
static unsigned long main_thread;

void rs_sigint_set_main(unsigned long ident)
{
    main_thread = ident;
}

int rs_sigint_owner(void)
{
    return (unsigned long)pthread_self() == main_thread && !held;
}

int rs_sigint_hold(void)
{
    static int atfork;
    /* No SA_RESTART: Python's own handler has none either. */
    struct sigaction counter = {.sa_handler = count}, was;
    if (held)
        return 0;
    if (!atfork)
        atfork = pthread_atfork(NULL, NULL, forked_child) == 0 ? 1 : -1;
    sigemptyset(&counter.sa_mask);
    __atomic_store_n(&arrived, 0, __ATOMIC_RELAXED);
    if (sigaction(SIGINT, &counter, &was) < 0)
        return 0;
    /* Held only where a handler runs: SIG_DFL and SIG_IGN act in the
     * kernel, with nothing to defer, and must not change meanwhile. */
    if (was.sa_handler == SIG_DFL || was.sa_handler == SIG_IGN) {
        sigaction(SIGINT, &was, NULL);
        return 0;
    }
    if (was.sa_flags & SA_RESTART) {   /* siginterrupt(SIGINT, False) */
        counter.sa_flags |= SA_RESTART;
        sigaction(SIGINT, &counter, NULL);
    }
    program = was;
    held = 1;
    return 1;
}

long rs_sigint_take(void)
{
    return (long)__atomic_exchange_n(&arrived, 0, __ATOMIC_RELAXED);
}

long rs_sigint_release(void)
{
    struct sigaction now;
    if (!held)
        return 0;
    if (sigaction(SIGINT, &program, &now) == 0) {
        if (now.sa_handler != count)
            sigaction(SIGINT, &now, NULL);         /* the program's new action */
        else if ((now.sa_flags ^ program.sa_flags) & SA_RESTART) {
            program.sa_flags ^= SA_RESTART;        /* its siginterrupt() */
            sigaction(SIGINT, &program, NULL);
        }
    }
    held = 0;
    return rs_sigint_take();
}
