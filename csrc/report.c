/*
 * MAP_SHARED report slots, for where CLONE_VM is emulated by a fork (spawn.c's
 * table). One page for the whole process (one slot of vm.max_map_count),
 * mapped at the first spawn and retried by later ones if that failed: without
 * it only an emulator would lose errors. The page is shared with fork()ed
 * copies of the process too, hence the spawn ids.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "child.h"

#define RS_REPORT_SLOTS 128     /* 4096 / sizeof(struct rs_report), rounded down to 64s */

static struct rs_report *report_page;
static uint64_t slot_taken[RS_REPORT_SLOTS / 64];
static unsigned long spawn_count;   /* rs_spawn() calls: one id each */

struct rs_report *rs_take_report_slot(void)
{
    struct rs_report *page = __atomic_load_n(&report_page, __ATOMIC_ACQUIRE);
    if (!page) {
        void *map = mmap(NULL, RS_REPORT_SLOTS * sizeof *page, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            return NULL;
        page = map;
        if (!__atomic_compare_exchange_n(&report_page, &(struct rs_report *){NULL}, page,
                                         0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            munmap(map, RS_REPORT_SLOTS * sizeof *page);    /* another thread won */
            page = __atomic_load_n(&report_page, __ATOMIC_ACQUIRE);
        }
    }
    for (int w = 0; w < RS_REPORT_SLOTS / 64; w++) {
        uint64_t taken = __atomic_load_n(&slot_taken[w], __ATOMIC_RELAXED);
        while (~taken) {
            int bit = __builtin_ctzll(~taken);
            if (__atomic_compare_exchange_n(&slot_taken[w], &taken,
                                            taken | (1ULL << bit), 0,
                                            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                return &page[w * 64 + bit];
        }
    }
    return NULL;    /* more spawns in flight than slots: report privately */
}

void rs_give_report_slot(struct rs_report *slot)
{
    if (slot) {
        long i = slot - report_page;
        __atomic_and_fetch(&slot_taken[i / 64], ~(1ULL << (i % 64)), __ATOMIC_RELEASE);
    }
}

unsigned long rs_spawn_count(void)
{
    return __atomic_load_n(&spawn_count, __ATOMIC_RELAXED);
}

/* Unique to this spawn, among fork()ed copies sharing the page too. */
uint64_t rs_new_spawn_id(void)
{
    return (uint64_t)getpid() << 32 |
           (uint32_t)__atomic_add_fetch(&spawn_count, 1, __ATOMIC_RELAXED);
}
