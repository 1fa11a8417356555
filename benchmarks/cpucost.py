"""The parent's CPU per spawn: rdmaspawn.Popen, subprocess under patch(), stock subprocess.

Interleaved batches of ``Popen([child]).wait()`` in one process, timed with
``time.process_time()`` (this process's user + system CPU, not the child's)
and ``time.perf_counter()``; medians over the batches, in microseconds per
spawn, and each one's ratio to stock subprocess. A measurement, not a test.

    python -m rdmaspawn.bench.cpucost [--child PATH] [--batches N] [--spawns N]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

from rdmaspawn.dropin import patch as _patch
from rdmaspawn.dropin.popen import Popen as RdmaspawnPopen

#: The kinds, in the order they are reported; "subprocess" is the reference.
KINDS = ("rdmaspawn", "patched", "subprocess")
LABELS = {
    "rdmaspawn": "rdmaspawn.Popen",
    "patched": "subprocess under patch()",
    "subprocess": "subprocess (CPython's)",
}


@dataclass
class CpuCost:
    kind: str
    cpu_us: float  # median CPU per spawn, this process
    wall_us: float  # median latency per spawn

    def ratio(self, ref: CpuCost) -> float:
        return self.cpu_us / ref.cpu_us


def _batch(call: Callable[[], None], spawns: int) -> tuple[float, float]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(spawns):
        call()
    cpu1, wall1 = time.process_time(), time.perf_counter()
    return (cpu1 - cpu0) / spawns * 1e6, (wall1 - wall0) / spawns * 1e6


def measure(child: str, batches: int = 16, spawns: int = 25) -> list[CpuCost]:
    """Each kind's median CPU and latency per spawn, batches interleaved."""
    argv = [child]
    stock = subprocess.Popen

    def rdmaspawn_popen() -> None:
        RdmaspawnPopen(argv).wait()

    def patched() -> None:
        subprocess.Popen(argv).wait()

    def plain() -> None:
        stock(argv).wait()

    calls = {"rdmaspawn": rdmaspawn_popen, "patched": patched, "subprocess": plain}
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    wall: dict[str, list[float]] = {k: [] for k in KINDS}
    for kind in KINDS:  # warm-up: first imports, first-call caches
        _run(kind, calls[kind], 5)
    for _ in range(batches):
        for kind in KINDS:
            c, w = _run(kind, calls[kind], spawns)
            cpu[kind].append(c)
            wall[kind].append(w)
    return [CpuCost(k, statistics.median(cpu[k]), statistics.median(wall[k])) for k in KINDS]


def _run(kind: str, call: Callable[[], None], spawns: int) -> tuple[float, float]:
    if kind != "patched":
        return _batch(call, spawns)
    _patch.patch()
    try:
        return _batch(call, spawns)
    finally:
        _patch.unpatch()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", default="/bin/true")
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--spawns", type=int, default=25)
    args = parser.parse_args()
    costs = measure(args.child, args.batches, args.spawns)
    ref = costs[-1]
    print(f"{'':26} {'CPU us':>8} {'ratio':>6} {'wall us':>8}")
    for c in costs:
        print(f"{LABELS[c.kind]:26} {c.cpu_us:8.1f} {c.ratio(ref):6.2f} {c.wall_us:8.1f}")


if __name__ == "__main__":
    main()
