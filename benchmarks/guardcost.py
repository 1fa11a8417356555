"""What ``rdmaspawn.guard()`` adds to each ``os.fork()``, side by side with a plain fork.

Per shape of process, three ways in turn: plain (no guard); guarded
(``guard("warn")``, no DONTFORK memory: what the guard costs in production);
smaps first (``/proc/self/smaps`` searched before each fork, as the guard
does for ``fork_exec``).
"""
from __future__ import annotations

import argparse
import mmap
import statistics
import time
from pathlib import Path

from rdmaspawn._host.procfs import has_dontfork
from rdmaspawn.tools.guard import guard, unguard

from .doctable import check_page, parse_shapes, publish, ran_on
from .forkshape import fork_ms, grow, mappings

MiB = 1 << 20


def _smaps_first() -> float:
    start = time.perf_counter()
    has_dontfork()
    return (time.perf_counter() - start) * 1e3 + fork_ms()


def measure(rounds: int) -> list[float]:
    """Median ms of a plain fork, a guarded one and one after a search of smaps."""
    times: dict[str, list[float]] = {"plain": [], "guarded": [], "first": []}
    kinds = list(times)
    for r in range(rounds):
        for kind in kinds[r % 3:] + kinds[:r % 3]:  # each kind in each place in turn
            if kind == "guarded":
                guard("warn")
            try:
                times[kind].append(_smaps_first() if kind == "first" else fork_ms())
            finally:
                if kind == "guarded":
                    unguard()
    return [statistics.median(t) for t in times.values()]


def table(shapes: list[tuple[int, int]], rounds: int) -> list[str]:
    lines = ["| mappings | resident | plain fork | guarded | guarded / plain | smaps first | smaps first / plain |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    keep: list[mmap.mmap] = []
    for count, resident in sorted(shapes):  # at least so many mappings, so much resident
        grow(count, keep)
        held = sum(len(m) for m in keep if len(m) > mmap.PAGESIZE) // MiB
        if resident > held:
            big = mmap.mmap(-1, (resident - held) * MiB)
            for at in range(0, len(big), mmap.PAGESIZE):
                big[at] = 1
            keep.append(big)
        plain, guarded, first = measure(rounds)
        lines.append(f"| {mappings():,} | {resident:,} MiB | {plain:.2f} ms | {guarded:.2f} ms | "
                     f"{guarded / plain:.2f}x | {first:.2f} ms | {first / plain:.2f}x |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="300:0,3000:0,30000:0,300:1024",
                        help="MAPPINGS:RESIDENT_MIB,... (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--doc", type=Path, help="write the table between this page's markers")
    args = parser.parse_args()
    check_page("guardcost", args.doc)
    shapes = parse_shapes(args.shapes)
    head = f"{ran_on('guardcost', args.rounds)}, each round one fork of each kind:"
    publish("guardcost", [head, "", *table(shapes, args.rounds)], args.doc)


if __name__ == "__main__":
    main()
