"""What the fork repair adds to each ``fork()``, side by side with a plain fork.

"plain" keeps libibverbs' marks, "repaired" starts the repair before them;
"one sweep" is the repair started after them, once. The workers start it
without asking the kernel (``start_without_asking``): nothing is pinned, so
the cost is the same and the result safe. ``--real`` and ``--vmas``:
repairreal.py.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from . import repairreal
from .doctable import check_page, parse_shapes, publish, ran_on
from .workers import FORKSHAPE, Worker, take_turns

DEFAULT_SHAPES = "360:0,360:1,360:100,30000:0,30000:1,30000:100"

# One worker: builds its shape, then answers each line on stdin with the
# milliseconds of one fork + wait (or, for "sweep", the repair's start).
WORKER = FORKSHAPE + r"""
import ctypes, json, sys
kind, count, registrations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from rdmaspawn._native import forkrepair
from rdmaspawn._rdmaspawn_cffi import lib  # noqa: F401  (loaded before any timing)
verbs = ctypes.CDLL("libibverbs.so.1")
verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
assert verbs.ibv_fork_init() == 0
if kind == "repaired":
    forkrepair.start_without_asking()
keep = []
for _ in range(registrations):
    m = mmap.mmap(-1, 65536)
    m[0] = 1
    keep.append(m)
    assert verbs.ibv_dontfork_range(ctypes.addressof(ctypes.c_char.from_buffer(m)), 65536) == 0
grow(count, keep)
print(json.dumps({"mappings": mappings()}), flush=True)
for line in sys.stdin:
    if kind != "sweep":
        print(fork_ms(), flush=True)
        continue
    start = time.perf_counter()
    forkrepair.start_without_asking()
    print((time.perf_counter() - start) * 1e3, flush=True)
    break
"""


def measure(mappings: int, registrations: int, rounds: int) -> tuple[int, float, float, float]:
    """Mappings, median ms of a plain and a repaired fork, and one sweep's ms."""
    shape = (str(mappings), str(registrations))
    workers = {k: Worker(WORKER, k, *shape) for k in ("plain", "repaired")}
    seen = int(json.loads(workers["plain"].first)["mappings"])
    times = take_turns(workers, rounds)
    sweeper = Worker(WORKER, "sweep", *shape)
    sweep = sweeper.once()
    sweeper.close()
    return seen, statistics.median(times["plain"]), statistics.median(times["repaired"]), sweep


def table(shapes: list[tuple[int, int]], rounds: int) -> list[str]:
    lines = ["| mappings | registrations | plain fork | repaired | repaired / plain | one sweep |",
             "|---:|---:|---:|---:|---:|---:|"]
    for mappings, registrations in shapes:
        seen, plain, repaired, sweep = measure(mappings, registrations, rounds)
        lines.append(f"| {seen:,} | {registrations} | {plain:.2f} ms | {repaired:.2f} ms | "
                     f"{repaired / plain:.2f}x | {sweep:.2f} ms |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES,
                        help="MAPPINGS:REGISTRATIONS,... (default: %(default)s)")
    parser.add_argument("--rounds", type=int, help="default: 21, with --real 11")
    parser.add_argument("--doc", type=Path, help="write the table between this page's markers")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true",
                      help="real registrations on an RDMA device (RDMASPAWN_BENCH_DEVICE, rxe0)")
    mode.add_argument("--vmas", action="store_true",
                      help="mappings through register/deregister cycles on an RDMA device")
    parser.add_argument("--sizes", default="0,64,512,1024", help="--real: MiB registered")
    parser.add_argument("--variants", default=",".join(repairreal.DEFAULT_VARIANTS),
                        help=f"--real: of {','.join(repairreal.VARIANTS)} (default: %(default)s)")
    parser.add_argument("--placement", choices=("mmap", "malloc", "lone"), default="mmap",
                        help="--real: each registration a mapping of its own, a malloc()ed "
                             "block, or a mapping between guard pages (default: %(default)s)")
    parser.add_argument("--cycles", type=int, default=10000, help="--vmas (default: %(default)s)")
    parser.add_argument("--large-mib", type=int, default=8, help="--vmas (default: %(default)s)")
    parser.add_argument("--large-every", type=int, default=1,
                        help="--vmas: a large registration every N cycles (default: %(default)s)")
    parser.add_argument("--window", type=int, default=16,
                        help="--vmas: registrations kept (default: %(default)s)")
    args = parser.parse_args()
    if args.vmas:
        check_page("repaircost-vmas", args.doc)
        result = repairreal.run_vmas(args.cycles, args.large_mib, args.large_every, args.window)
        publish("repaircost-vmas", repairreal.render_vmas(result), args.doc,
                "repaircost --vmas --doc")
    elif args.real:
        rounds = args.rounds or 11
        check_page("repaircost-real", args.doc)
        lines, result = repairreal.run_forks([int(s) for s in args.sizes.split(",")], rounds,
                                             tuple(args.variants.split(",")), args.placement)
        extra = "".join(f" --{k} {getattr(args, k)}" for k in ("sizes", "variants", "placement")
                        if getattr(args, k) != parser.get_default(k))
        head = (f"{ran_on('repaircost --real', rounds, extra)}, each round one fork of each "
                "variant in its own process, the child's VmRSS read right after fork:")
        publish("repaircost-real", [head, "", *lines], args.doc, "repaircost --real --doc")
    else:
        rounds = args.rounds or 21
        check_page("repaircost", args.doc)
        head = (f"{ran_on('repaircost', rounds)}, each round one fork of each kind, "
                "in two processes of the same shape:")
        publish("repaircost", [head, "", *table(parse_shapes(args.shapes), rounds)], args.doc)
        return
    print(json.dumps(result))


if __name__ == "__main__":
    main()
