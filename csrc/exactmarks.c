/*
 * The marks the fork repair made itself, each exact: the inner pages of one
 * registration, which hold nothing a fork() child needs. The sweep keeps
 * them (unmark.c) and the guard does not count them (rs_repair_exact, asked
 * through rdmaspawn/_native/forkrepair.py). A deregistration forgets those
 * inside its range. The table is also the bound on the marks alive: a mark
 * splits a mapping in up to three, and vm.max_map_count (65530 by default)
 * caps a process's mappings, so past RS_EXACT marks a registration is left
 * unmarked (its pages are copied at fork instead). Lock-free: registering
 * threads add while a fork's prepare handler or the guard reads.
 */
#include "exactmarks.h"
#include "rdmaspawn.h"

#define RS_EXACT 4096
static struct { unsigned long lo, hi; } exact[RS_EXACT];

int rs_exact_remember(unsigned long lo, unsigned long hi)
{
    for (int i = 0; i < RS_EXACT; i++) {
        unsigned long none = 0;
        if (__atomic_compare_exchange_n(&exact[i].lo, &none, lo, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&exact[i].hi, hi, __ATOMIC_RELEASE);
            return 0;
        }
    }
    return -1;
}

void rs_exact_drop(unsigned long lo, unsigned long hi)
{
    for (int i = 0; i < RS_EXACT; i++) {
        unsigned long a = lo;
        if (__atomic_load_n(&exact[i].hi, __ATOMIC_ACQUIRE) == hi
                && __atomic_compare_exchange_n(&exact[i].lo, &a, 0, 0,
                                               __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&exact[i].hi, 0, __ATOMIC_RELEASE);
            return;
        }
    }
}

long rs_exact_bound(void)
{
    return RS_EXACT;
}

void rs_exact_forget(unsigned long lo, unsigned long hi)
{
    for (int i = 0; i < RS_EXACT; i++) {
        unsigned long a = __atomic_load_n(&exact[i].lo, __ATOMIC_ACQUIRE);
        unsigned long b = __atomic_load_n(&exact[i].hi, __ATOMIC_ACQUIRE);
        if (!a || !b || b <= lo || a >= hi)
            continue;
        if (a >= lo && b <= hi) {  /* all of it: the slot is free again */
            if (__atomic_compare_exchange_n(&exact[i].lo, &a, 0, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                __atomic_store_n(&exact[i].hi, 0, __ATOMIC_RELEASE);
        } else if (a >= lo) {      /* its start: the rest stays marked */
            __atomic_store_n(&exact[i].lo, hi, __ATOMIC_RELEASE);
        } else if (b <= hi) {      /* its end */
            __atomic_store_n(&exact[i].hi, lo, __ATOMIC_RELEASE);
        }                          /* its middle: kept whole, vouching for both sides */
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

