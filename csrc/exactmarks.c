/*
 * The marks the fork repair made itself, each exact: the inner pages of one
 * registration, which hold nothing a fork() child needs. The sweep keeps
 * them (unmark.c) and the guard does not count them (rs_repair_exact, asked
 * through rdmaspawn/_native/forkrepair.py). A deregistration forgets those
 * inside its range. Where the table is full a mark is made all the same and
 * only not vouched for. Lock-free: registering threads add while a fork's
 * prepare handler or the guard reads.
 */
#include "exactmarks.h"
#include "rdmaspawn.h"

#define RS_EXACT 4096
static struct { unsigned long lo, hi; } exact[RS_EXACT];

void rs_exact_remember(unsigned long lo, unsigned long hi)
{
    for (int i = 0; i < RS_EXACT; i++) {
        unsigned long none = 0;
        if (__atomic_compare_exchange_n(&exact[i].lo, &none, lo, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&exact[i].hi, hi, __ATOMIC_RELEASE);
            return;
        }
    }
}

void rs_exact_forget(unsigned long lo, unsigned long hi)
{
    for (int i = 0; i < RS_EXACT; i++) {
        unsigned long a = __atomic_load_n(&exact[i].lo, __ATOMIC_ACQUIRE);
        unsigned long b = __atomic_load_n(&exact[i].hi, __ATOMIC_ACQUIRE);
        if (a && b && a >= lo && b <= hi
                && __atomic_compare_exchange_n(&exact[i].lo, &a, 0, 0,
                                               __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            __atomic_store_n(&exact[i].hi, 0, __ATOMIC_RELEASE);
    }
}

int rs_repair_exact(unsigned long lo, unsigned long hi)
{
    for (int i = 0; i < RS_EXACT; i++) {
        unsigned long a = __atomic_load_n(&exact[i].lo, __ATOMIC_ACQUIRE);
        unsigned long b = __atomic_load_n(&exact[i].hi, __ATOMIC_ACQUIRE);
        if (a && a <= lo && hi <= b)
            return 1;
    }
    return 0;
}

