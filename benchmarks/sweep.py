"""The sweep: every resident size times every thread count, one configuration at a time.

The parent's resident memory is an anonymous mapping with every page written,
held by this Python process, so every in-process spawner sees it (the floor, in
its own process, stays the floor).  Sizes that do not fit in MemAvailable minus
a margin are skipped, and the report says so.
"""

from __future__ import annotations

import gc
import mmap
import os
import time

from .build import Built
from .machine import meminfo
from .measure import measure_config
from .model import ConfigResult, Skipped
from .numbers import GiB, fmt_gib, log
from .spawners import Spawner

WARMUP_SPAWNS = 50  # per spawner, unrecorded, before the first configuration
WARMUP_SECONDS = 0.5
MIN_FREE_BYTES = 2 * GiB  # memory always left free when sizing the sweep
MIN_FREE_FRACTION = 10  # ... or 1/this of MemTotal, whichever is larger


def safety_margin(total: int) -> int:
    """Memory left free when sizing the sweep: the children, the page tables of
    forked copies and the rest of the machine need room too."""
    return max(MIN_FREE_BYTES, total // MIN_FREE_FRACTION)


def resident(size: int) -> mmap.mmap | None:
    """`size` bytes of anonymous memory in this process, every page written,
    so that it is resident (not merely reserved) while the spawners run."""
    if size <= 0:
        return None
    # MAP_POPULATE (Python 3.10+) faults the pages in at once, which is
    # faster; writing a byte to every page makes them resident either way.
    populate = getattr(mmap, "MAP_POPULATE", 0)
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    m[::mmap.PAGESIZE] = b"\x01" * len(range(0, size, mmap.PAGESIZE))
    return m


def sweep(spawners: list[Spawner], built: Built, mem_gib: list[float], thread_counts: list[int],
          iterations: int, time_cap_s: float, pin: bool
          ) -> tuple[list[ConfigResult], list[float], list[Skipped]]:
    """The results, the sizes that ran and those skipped."""
    log("warming up ...")
    # Unrecorded: the first configuration would otherwise also pay for cold
    # caches, lazy imports and the CPU's frequency ramp.
    measure_config(spawners, built, 1, WARMUP_SPAWNS, WARMUP_SECONDS, "warm-up", quiet=True)
    results: list[ConfigResult] = []
    measured: list[float] = []
    skipped: list[Skipped] = []
    base_cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    total = len(mem_gib) * len(thread_counts)
    for k, mem in enumerate(mem_gib):
        size = int(mem * GiB)
        mi = meminfo()
        avail, margin = mi.get("MemAvailable", 0), safety_margin(mi.get("MemTotal", 0))
        held = reason = None
        if mem > 0 and size > avail - margin:
            reason = (f"needs {fmt_gib(mem)}, MemAvailable is {avail / GiB:.1f} GiB and "
                      f"{margin / GiB:.1f} GiB stay free")
        else:
            if size:
                log(f"touching {fmt_gib(mem)} of resident memory ...")
            t0 = time.monotonic()
            try:
                held = resident(size)
            except (OSError, MemoryError, ValueError) as e:
                reason = f"cannot map {fmt_gib(mem)}: {e}"
            touch_s = time.monotonic() - t0
        if reason is not None:
            log(f"skipping {fmt_gib(mem)}: {reason}")
            skipped.append(Skipped(mem, reason))
            continue
        measured.append(mem)
        try:
            for j, threads in enumerate(thread_counts):
                label = f"[{k * len(thread_counts) + j + 1}/{total}] {fmt_gib(mem)}, {threads} thread(s)"
                log(f"{label} ...")
                gc.collect()
                cpus = base_cpus[:threads] if pin and base_cpus else None
                c0 = time.monotonic()
                figures = measure_config(spawners, built, threads, iterations, time_cap_s,
                                         label, cpus)
                log(f"{label} done in {time.monotonic() - c0:.1f} s")
                results.append(ConfigResult(mem, threads, round(touch_s, 3), size, cpus, figures))
        finally:
            if held is not None:
                held.close()
    return results, measured, skipped
