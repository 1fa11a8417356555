"""A process's mappings, and one timed fork: guardcost's, and, its source put
before their scripts, the workers' of repaircost, markcost and repairreal (so
the standard library only, and no ``from __future__``)."""
import mmap
import os
import time


def mappings() -> int:
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")


def grow(count: int, keep: list) -> None:  # type: ignore[type-arg]
    """At least ``count`` mappings, each page in memory: page tables to copy and to walk."""
    # Neighbouring anonymous mappings with the same protection merge into
    # one; alternating read-only and read-write pages keeps them apart.
    while mappings() < count:
        for i in range(min(1000, count - mappings())):
            m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            m[0] = 1
            keep.append(m)
            if i % 2:
                keep.append(mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ))


def fork_ms() -> float:
    """One ``os.fork()`` + ``waitpid()`` of a child that exits at once, in ms."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return (time.perf_counter() - start) * 1e3
