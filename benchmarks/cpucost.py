"""What one spawn costs the parent in CPU: rdmaspawn side by side with CPython.

Times ``Popen([CHILD]).wait()`` for three spawners in one process, in
interleaved batches so that the machine's load hits all three alike:
``rdmaspawn.Popen``, ``subprocess.Popen`` under ``rdmaspawn.patch()``, and
stock ``subprocess.Popen``. Each batch's figure is the parent's own CPU
(``time.process_time()``: user+system of this process, not the child's)
per spawn; the report gives the median of the batches and each rdmaspawn
spawner's ratio to stock ``subprocess``. A measurement, not a test.

    python -m rdmaspawn.bench.cpucost [--batches N] [--spawns N] [--child PATH]
"""
from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import time
from typing import Callable

from rdmaspawn.dropin import patch as _patch
from rdmaspawn.dropin.popen import Popen as RdmaspawnPopen

#: The spawners, in the order the report lists them; the last is the reference.
SPAWNERS = ("rdmaspawn.Popen", "subprocess, patch()", "subprocess")
REFERENCE = "subprocess"


def _batch_us(popen: Callable[..., subprocess.Popen[bytes]], argv: list[str],
              spawns: int) -> float:
    """The parent's CPU per ``popen(argv).wait()``, in microseconds."""
    start = time.process_time()
    for _ in range(spawns):
        popen(argv).wait()
    return (time.process_time() - start) / spawns * 1e6


def measure(argv: list[str], batches: int, spawns: int) -> dict[str, list[float]]:
    """Each spawner's CPU per spawn, one figure per batch, interleaved."""
    times: dict[str, list[float]] = {name: [] for name in SPAWNERS}
    was_patched = _patch.is_patched()
    try:
        for _ in range(batches):
            _patch.unpatch()
            times["rdmaspawn.Popen"].append(_batch_us(RdmaspawnPopen, argv, spawns))
            times["subprocess"].append(_batch_us(subprocess.Popen, argv, spawns))
            _patch.patch()
            times["subprocess, patch()"].append(_batch_us(subprocess.Popen, argv, spawns))
    finally:
        if was_patched:
            _patch.patch()
        else:
            _patch.unpatch()
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def report(times: dict[str, list[float]], batches: int, spawns: int) -> list[str]:
    med = medians(times)
    ref = med[REFERENCE]
    lines = [f"CPython {platform.python_version()} ({platform.machine()}): parent CPU per "
             f"Popen(...).wait(), median of {batches} interleaved batches of {spawns}"]
    for name in SPAWNERS:
        lines.append(f"  {name:<21} {med[name]:7.1f} us  (min {min(times[name]):6.1f})  "
                     f"{med[name] / ref:5.2f}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--spawns", type=int, default=25)
    parser.add_argument("--child", default=shutil.which("true") or "/bin/true")
    args = parser.parse_args()
    measure([args.child], 2, args.spawns)  # warm up: imports, first-call caches
    times = measure([args.child], args.batches, args.spawns)
    print("\n".join(report(times, args.batches, args.spawns)))


if __name__ == "__main__":
    main()
