"""Measure one configuration: the spawners interleaved, round by round.

Every round gives each spawner a short batch, so drift (frequency scaling, a
noisy neighbour) falls on all alike and their ratios are side by side.  A
spawner that is slow (fork with gigabytes resident) stops at a wall-time cap
with fewer samples instead of holding the whole run up.
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .build import Built
from .model import ERROR, OK, Figures
from .numbers import log, quantile
from .spawners import Spawner

MIN_ROUNDS = 8  # a configuration is split into at least this many rounds
ROUND_SECONDS = 0.25  # aim for batches about this long, so slow spawners interleave too
MIN_SAMPLES = 5  # the time cap never stops a spawner below this many spawns
FLOOR_BATCH_TIMEOUT_S = 600.0  # a floor batch that takes longer is broken


@dataclass
class Batch:
    lat_ns: list[int]  # each spawn + wait
    wall_ns: int  # first thread's start to last thread's end
    cpu_ns: int  # the spawning process's CPU over the batch


def cpu_ns_self() -> int:
    """User + system CPU of this whole process (all threads), in ns."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


def run_batch_inprocess(
    call: Callable[[], None], per_thread: int, threads: int, pin: list[int] | None = None
) -> Batch:
    """`threads` threads each spawn `per_thread` times, all starting together.
    With `pin`, thread i (and so its children) runs on CPU pin[i % len(pin)] only."""
    start = threading.Barrier(threads + 1)
    lats: list[list[int]] = [[] for _ in range(threads)]
    spans: list[tuple[int, int]] = []  # each thread's (first start, last end)
    errors: list[BaseException] = []

    def work(i: int, mine: list[int]) -> None:
        clock = time.perf_counter_ns
        try:
            if pin:
                os.sched_setaffinity(0, {pin[i % len(pin)]})  # 0: this thread only
            start.wait()
            first = clock()
            for _ in range(per_thread):
                t0 = clock()
                call()
                mine.append(clock() - t0)
            spans.append((first, clock()))
        except BaseException as e:  # noqa: BLE001 - re-raised by the main thread
            errors.append(e)

    workers = [threading.Thread(target=work, args=(i, lats[i]), daemon=True)
               for i in range(threads)]
    for w in workers:
        w.start()
    c0 = cpu_ns_self()
    start.wait()
    for w in workers:
        w.join()
    c1 = cpu_ns_self()
    if errors:
        raise errors[0]
    # Wall time from the first thread's start to the last one's end: the main
    # thread may wake from the barrier after the workers have begun.
    wall = max(e for _, e in spans) - min(b for b, _ in spans)
    return Batch([x for lst in lats for x in lst], wall, c1 - c0)


def run_batch_floor(floor: str, child: str, per_thread: int, threads: int, pin: bool) -> Batch:
    """One batch of the C floor; it prints "lat NS" lines, wall_ns, cpu_ns (see floor.c)."""
    args = [floor, str(per_thread), str(threads), child] + (["pin"] if pin else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=FLOOR_BATCH_TIMEOUT_S,
                       check=False)
    pairs = [line.partition(" ")[::2] for line in r.stdout.splitlines()]
    lats = [int(val) for key, val in pairs if key == "lat"]
    last = {key: val for key, val in pairs if key != "lat"}
    # Exit status 0 with no spawn timed is a failure too.
    error = last.get("error") or ("" if r.returncode or lats else "no samples")
    if r.returncode != 0 or error:
        raise RuntimeError(f"floor failed (status {r.returncode}): {error or r.stderr.strip()}")
    return Batch(lats, int(last.get("wall_ns", 0)), int(last.get("cpu_ns", 0)))


@dataclass
class Tally:
    """What one spawner gathered in one configuration so far."""

    batches: list[Batch] = field(default_factory=list)
    spent_s: float = 0.0
    est_s: float = 0.0  # seconds per spawn, per thread, from what ran so far
    capped: bool = False
    error: str = ""
    done: bool = False

    @property
    def samples(self) -> int:
        return sum(len(b.lat_ns) for b in self.batches)


def summarize(t: Tally, in_process: bool) -> Figures:
    xs = sorted(x / 1000 for b in t.batches for x in b.lat_ns)
    n = len(xs)
    wall_ns = sum(b.wall_ns for b in t.batches)
    # Batches that timed nothing say nothing about rates.
    timed = [b for b in t.batches if b.lat_ns and b.wall_ns > 0]
    rates = [len(b.lat_ns) / (b.wall_ns / 1e9) for b in timed]
    return Figures(
        status=ERROR if t.error else OK,
        samples=n,
        batches=len(t.batches),
        capped=t.capped,
        median_us=quantile(xs, 0.5),
        p10_us=quantile(xs, 0.10),
        p25_us=quantile(xs, 0.25),
        p75_us=quantile(xs, 0.75),
        p90_us=quantile(xs, 0.90),
        min_us=xs[0] if xs else None,
        max_us=xs[-1] if xs else None,
        mean_us=sum(xs) / n if n else None,
        throughput_per_s=quantile(sorted(rates), 0.5),
        batch_median_us=[round((quantile(sorted(b.lat_ns), 0.5) or 0.0) / 1000, 3)
                         for b in timed],
        batch_throughput_per_s=[round(x, 1) for x in rates],
        batch_cpu_per_spawn_us=[round(b.cpu_ns / 1000 / len(b.lat_ns), 3) for b in timed],
        throughput_overall_per_s=n / (wall_ns / 1e9) if wall_ns else None,
        cpu_per_spawn_us=(sum(b.cpu_ns for b in t.batches) / 1000) / n if n else None,
        cpu_measured_in="parent (RUSAGE_SELF)" if in_process
        else "floor's own process (RUSAGE_SELF)",
        error=t.error,
    )


def measure_config(
    spawners: list[Spawner],
    built: Built,
    threads: int,
    iterations: int,
    time_cap: float,
    label: str,
    pin: list[int] | None = None,
    quiet: bool = False,
) -> dict[str, Figures]:
    """Interleave the available spawners in rounds until each has `iterations`
    spawns or has spent `time_cap` seconds (with at least MIN_SAMPLES)."""
    live = [s for s in spawners if s.status == OK]
    tallies = {s.id: Tally() for s in live}
    target = max(iterations, threads)
    max_per_thread_round = max(1, math.ceil(target / (threads * MIN_ROUNDS)))

    def one_batch(s: Spawner, per_thread: int) -> Batch | None:
        """One batch; None where it failed, recorded: a failing spawner is reported, not fatal."""
        try:
            if s.in_process:
                assert s.call is not None
                return run_batch_inprocess(s.call, per_thread, threads, pin)
            assert built.floor is not None
            return run_batch_floor(built.floor, built.child, per_thread, threads, bool(pin))
        except Exception as e:  # noqa: BLE001
            tallies[s.id].error, tallies[s.id].done = f"{type(e).__name__}: {e}", True
            return None

    # Warm-up: one unrecorded spawn each, which also proves the spawner works
    # here and gives a first estimate of its cost.
    for s in live:
        if (b := one_batch(s, 1)) is not None:
            tallies[s.id].est_s = max(max(b.lat_ns) / 1e9, 1e-6)

    rnd = 0
    while todo := [s for s in live if not tallies[s.id].done]:
        # Rotate the order each round, so that no spawner always follows the same one.
        k = rnd % len(todo)
        order = todo[k:] + todo[:k]
        rnd += 1
        if not quiet:
            have = sum(tallies[s.id].samples for s in order)
            log(f"  {label}: round {rnd}, {have} spawns so far, {len(order)} spawner(s) running")
        for s in order:
            t = tallies[s.id]
            per_thread = min(max_per_thread_round, max(1, int(ROUND_SECONDS / t.est_s)),
                             max(1, math.ceil((target - t.samples) / threads)))
            if t.spent_s + per_thread * t.est_s > time_cap and t.samples >= MIN_SAMPLES:
                # The next batch would overrun the cap: stop with what we have.
                t.capped = t.done = True
                continue
            t0 = time.perf_counter()
            if (b := one_batch(s, per_thread)) is None:
                continue
            t.spent_s += time.perf_counter() - t0
            t.batches.append(b)
            if b.wall_ns > 0:  # per-thread seconds per spawn
                t.est_s = max(b.wall_ns / 1e9 / per_thread, 1e-6)
            if t.samples >= target:
                t.done = True
            elif t.spent_s >= time_cap and t.samples >= MIN_SAMPLES:
                t.capped = t.done = True

    return {s.id: summarize(tallies[s.id], s.in_process) if s.status == OK
            else Figures(status=s.status, reason=s.reason) for s in spawners}
