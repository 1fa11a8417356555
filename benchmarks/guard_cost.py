"""What rdmaspawn.guard() adds to each os.fork(), by how many mappings the process has.

    python benchmarks/guard_cost.py [--mappings 300,10000,60000] [--forks 20]

For each size the process first makes that many separate mappings (each
with a page in memory, so that the kernel has page tables to walk, as it
does for a real program's), then times os.fork() + waitpid() of a child
that exits at once: without the guard, with guard("warn") on (no DONTFORK
memory here, so it forks every time), and the guard's check alone. Prints
the medians and the ratio guarded/plain side by side. Run it on two
checkouts to compare them; nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import time
from typing import Callable

import rdmaspawn
from rdmaspawn.tools import guard as _guard


def _mappings() -> int:
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")


def _grow_to(target: int, keep: list[mmap.mmap]) -> None:
    # Neighbouring anonymous mappings with the same protection merge into
    # one; alternating read-only and read-write pages keeps them apart.
    while _mappings() < target:
        for i in range(min(1000, target - _mappings())):
            m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            m[0] = 1  # in memory
            if i % 2:
                m2 = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ)
                keep.append(m2)
            keep.append(m)


def _fork_once() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mappings", default="300,10000,60000")
    parser.add_argument("--forks", type=int, default=20)
    args = parser.parse_args()
    keep: list[mmap.mmap] = []
    print(f"{'mappings':>9} {'fork ms':>9} {'guarded ms':>11} {'ratio':>6} {'check ms':>9}")
    for target in (int(n) for n in args.mappings.split(",")):
        _grow_to(target, keep)
        plain = _median_ms(_fork_once, args.forks)
        rdmaspawn.guard("warn")
        guarded = _median_ms(_fork_once, args.forks)
        check = _median_ms(lambda: _guard._check("os.fork()"), args.forks)
        rdmaspawn.unguard()
        print(f"{_mappings():>9} {plain:>9.2f} {guarded:>11.2f} {guarded / plain:>6.2f} "
              f"{check:>9.2f}")


if __name__ == "__main__":
    main()
