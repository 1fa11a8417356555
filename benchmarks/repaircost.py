"""What the fork repair adds to each ``fork()``, side by side with a plain fork.

Two worker processes of the same shape (a number of mappings, and a number of
buffers libibverbs was asked to mark, as ``ibv_reg_mr()`` does, each in its
own mapping) take turns, round after round, so that the machine's load hits
both alike: each times one ``os.fork()`` + ``waitpid()`` of a child that
exits at once.

- plain: libibverbs loaded and fork protection on (``ibv_fork_init()``), the
  buffers marked ``MADV_DONTFORK``, no repair;
- repaired: the same, with the repair started before the buffers were
  marked, so libibverbs' calls were rewritten and nothing is marked; each
  fork pays the prepare handler's look for a new libibverbs.

"one sweep" is the one-time cost a third worker pays when the repair starts
after the buffers were marked: the read of ``/proc/self/smaps`` that
un-marks them. On a host without RDMA netlink the workers start the
mechanism without asking the kernel (``start_without_asking``): nothing is
registered or pinned, so the cost is the same and the result is safe.

Prints the medians and the ratios to plain; nothing here passes or fails.
``--doc PAGE`` also writes the table between the page's repaircost markers
(docs/how-it-works.md holds them).

``--real`` (on a machine with an RDMA device: tests/realdevice/bench_vm.sh
runs it in the soft-RoCE VM) times forks with memory really registered,
marked, repaired and unmarked, and prints the table and one JSON line;
``--vmas`` counts the mappings through register/deregister cycles. Both are
``repairreal.py``'s; their ``--doc`` blocks are ``repaircost-real`` and
``repaircost-vmas``.

    python -m rdmaspawn.bench.repaircost [--shapes 360:0,360:1,360:100,30000:0,...]
                                         [--rounds 21] [--doc PAGE]
    python -m rdmaspawn.bench.repaircost --real [--sizes 0,64,512,1024] [--rounds 11]
                                         [--variants marked,repaired,unmarked,swept,loaded]
                                         [--placement mmap|malloc|lone]
    python -m rdmaspawn.bench.repaircost --vmas [--cycles 10000] [--large-mib 8]
                                         [--large-every 1] [--window 16]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from rdmaspawn._host.interpreter import python_command

from . import repairreal
from .doctable import check_page, parse_shapes, publish, ran_on

DEFAULT_SHAPES = "360:0,360:1,360:100,30000:0,30000:1,30000:100"

# One worker: builds its shape, then answers each line on stdin with the
# milliseconds of one fork + wait (or, for "sweep", the repair's start).
WORKER = r"""
import ctypes, json, mmap, os, sys, time
kind, mappings, registrations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from rdmaspawn._native import forkrepair
from rdmaspawn._rdmaspawn_cffi import lib  # noqa: F401  (loaded before any timing)
verbs = ctypes.CDLL("libibverbs.so.1")
verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
assert verbs.ibv_fork_init() == 0
if kind == "repaired":
    forkrepair.start_without_asking()
keep = []
def count():
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")
for _ in range(registrations):
    m = mmap.mmap(-1, 65536)
    m[0] = 1
    keep.append(m)
    assert verbs.ibv_dontfork_range(ctypes.addressof(ctypes.c_char.from_buffer(m)), 65536) == 0
while count() < mappings:  # alternating protections keep neighbours from merging
    for i in range(min(1000, mappings - count())):
        m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        m[0] = 1
        keep.append(m)
        if i % 2:
            keep.append(mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ))
print(json.dumps({"mappings": count()}), flush=True)
for line in sys.stdin:
    start = time.perf_counter()
    if kind == "sweep":
        forkrepair.start_without_asking()
    else:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    print((time.perf_counter() - start) * 1e3, flush=True)
    if kind == "sweep":
        break
"""


class Worker:
    def __init__(self, kind: str, mappings: int, registrations: int) -> None:
        self.proc = subprocess.Popen(
            python_command(WORKER, kind, str(mappings), str(registrations)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.mappings = int(json.loads(self.proc.stdout.readline())["mappings"])

    def once(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def measure(mappings: int, registrations: int, rounds: int) -> tuple[int, float, float, float]:
    """Mappings, median ms of a plain and a repaired fork, and one sweep's ms."""
    workers = {k: Worker(k, mappings, registrations) for k in ("plain", "repaired")}
    times: dict[str, list[float]] = {k: [] for k in workers}
    try:
        for r in range(rounds):
            order = list(workers) if r % 2 == 0 else list(workers)[::-1]
            for kind in order:
                times[kind].append(workers[kind].once())
    finally:
        for w in workers.values():
            w.close()
    sweeper = Worker("sweep", mappings, registrations)
    sweep = sweeper.once()
    sweeper.close()
    return (workers["plain"].mappings, statistics.median(times["plain"]),
            statistics.median(times["repaired"]), sweep)


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
        print(json.dumps(result))
        return
    if args.real:
        rounds = args.rounds or 11
        check_page("repaircost-real", args.doc)
        variants = tuple(args.variants.split(","))
        lines, summary = repairreal.run_forks([int(s) for s in args.sizes.split(",")], rounds,
                                              variants, args.placement)
        extra = "" if args.sizes == "0,64,512,1024" else f" --sizes {args.sizes}"
        if variants != repairreal.DEFAULT_VARIANTS:
            extra += f" --variants {args.variants}"
        if args.placement != "mmap":
            extra += f" --placement {args.placement}"
        publish("repaircost-real", [repairreal.heading(rounds, extra), "", *lines], args.doc,
                "repaircost --real --doc")
        print(json.dumps(summary))
        return
    rounds = args.rounds or 21
    check_page("repaircost", args.doc)
    shapes = parse_shapes(args.shapes)
    head = f"{ran_on('repaircost', rounds)}, each round one fork of each kind, in two processes of the same shape:"
    publish("repaircost", [head, "", *table(shapes, rounds)], args.doc)

if __name__ == "__main__":
    main()
