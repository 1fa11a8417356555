"""Spawn latency, side by side: rdmaspawn against CPython's paths and a C floor.

Run it as ``python -m rdmaspawn bench [options]`` or
``python benchmarks/spawn_latency.py [options]``; ``--help`` lists the options.

Every spawner starts the same child and waits for it:

==================  ====================================================
``rdmaspawn``       ``rdmaspawn.Popen(argv).wait()``
``engine``          ``rdmaspawn._engine.spawn(...)`` then ``os.waitpid``
``subprocess``      ``subprocess.Popen(argv).wait()``: CPython's default
                    path (vfork on Linux since 3.10)
``subprocess-fork`` the same with ``preexec_fn``, which forces fork()
``posix_spawn``     ``os.posix_spawn`` then ``os.waitpid``
``floor``           a C loop of posix_spawn + waitpid in its own process
==================  ====================================================

The child is a static no-op built from ``noop.c`` (one execve, one
exit_group), so what is measured is the spawner, not the child.

What is swept:

* the parent's resident memory: an anonymous mapping with every page written,
  held by this Python process, so every spawner above except the floor sees
  it.  The floor runs in its own small process: its figures stay the floor at
  every size, by design;
* the number of threads spawning at once, for throughput (spawns per second).

Spawners are interleaved: each configuration runs in rounds, and every round
gives each spawner a short batch, so drift (frequency scaling, a noisy
neighbour) falls on all of them alike.  A spawner that is slow in a
configuration (fork with gigabytes resident) stops after a wall-time cap with
fewer samples instead of holding the whole run up.

On a VM, waking an idle vCPU can cost a whole scheduler tick (4 ms), which then
swamps spawns of ~100 us; ``--pin`` gives each spawning thread (and so its
children) a CPU of its own, which takes that out.  The report says when the C
floor itself is spread wide, the sign of such a machine.

The figures asked of rdmaspawn are printed as targets, MET or MISSED; they are
measurements, never assertions, and the exit status does not depend on them
(it is 1 only when a spawner failed or nothing could be measured).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import json
import math
import mmap
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

GiB = 1 << 30
HERE = Path(__file__).resolve().parent
SCHEMA = "rdmaspawn-bench/1"

DEFAULT_MEM_GIB = (0.0, 1.0, 4.0, 16.0)
DEFAULT_THREADS = (1, 2, 4)
DEFAULT_ITERATIONS = 500
DEFAULT_TIME_CAP = 20.0  # seconds of spawning per spawner per configuration
QUICK_MEM_GIB = (0.0, 1.0)
QUICK_THREADS = (1, 2)
QUICK_ITERATIONS = 200
QUICK_TIME_CAP = 1.5

MIN_ROUNDS = 8  # a configuration is split into at least this many rounds
ROUND_SECONDS = 0.25  # aim for batches about this long, so slow spawners interleave too
MIN_SAMPLES = 5  # the time cap never stops a spawner below this many spawns
WARMUP_SPAWNS = 50  # per spawner, before the first configuration
WARMUP_SECONDS = 0.5
BATCH_TIMEOUT = 600.0  # seconds: a floor batch that takes longer is broken

# Targets from the issue: (figure) <= or >= (threshold).
FLAT_MAX = 1.10  # rdmaspawn latency at the largest size / at the smallest
THIN_MAX = 1.10  # rdmaspawn.Popen / the C floor
PAR_MIN = 1.6  # throughput with 2 threads / with 1

FLOOR = "floor"
DEFAULT_PATH = "subprocess"
RDMASPAWN_IDS = ("rdmaspawn", "engine")


# ---------------------------------------------------------------------------
# Small helpers


def log(msg: str) -> None:
    """Progress goes to stderr so that stdout holds only the report."""
    print(msg, file=sys.stderr, flush=True)


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation (numpy's default), for n >= 1."""
    if not sorted_xs:
        return math.nan
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def fmt_gib(gib: float) -> str:
    return f"{gib:g} GiB"


def fmt_us(us: float | None) -> str:
    if us is None or math.isnan(us):
        return "-"
    if us >= 100_000:
        return f"{us / 1000:.0f} ms"
    if us >= 10_000:
        return f"{us / 1000:.1f} ms"
    return f"{us:.0f} us"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def cpu_ns_self() -> int:
    """User + system CPU of this whole process (all threads), in ns."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def safety_margin(total: int) -> int:
    """Memory left free when sizing the sweep: the children, the page tables of
    forked copies and the rest of the machine need room too."""
    return max(2 * GiB, total // 10)


def read_first(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# ---------------------------------------------------------------------------
# Building the child and the floor


@dataclass
class Built:
    child: str  # the executable every spawner starts
    child_kind: str  # how it was built, for the report
    floor: str | None  # the floor program, or None
    floor_reason: str  # why there is no floor, or how it was built
    cc: str | None
    notes: list[str] = field(default_factory=list)


def _cc(args: list[str]) -> tuple[bool, str]:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


def _runs_ok(path: str) -> bool:
    try:
        return subprocess.run([path], timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def build(workdir: Path) -> Built:
    """Compile noop.c and floor.c with the system cc into workdir."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    notes: list[str] = []
    child, child_kind = "/bin/true", "/bin/true (fallback)"
    floor: str | None = None
    floor_reason = "no C compiler (cc) found"

    if cc is None:
        notes.append("no C compiler: the child is /bin/true and there is no floor")
        return Built(child, child_kind, None, floor_reason, None, notes)

    noop_src = HERE / "noop.c"
    noop = workdir / "noop"
    attempts = [
        ("static, -nostdlib, raw exit_group", [cc, "-static", "-O2", "-nostdlib", "-DNOOP_NOSTDLIB"]),
        ("static, libc", [cc, "-static", "-O2"]),
    ]
    errors = []
    for kind, flags in attempts:
        ok, err = _cc(flags + ["-o", str(noop), str(noop_src)])
        if ok and _runs_ok(str(noop)):
            child, child_kind = str(noop), kind
            break
        errors.append(f"{kind}: {err.splitlines()[-1] if err else 'does not run'}")
    else:
        notes.append("could not build the no-op child, using /bin/true: " + "; ".join(errors))

    floor_bin = workdir / "floor"
    ok, err = _cc([cc, "-O2", "-pthread", "-o", str(floor_bin), str(HERE / "floor.c")])
    if not ok:
        floor_reason = "cc failed on floor.c: " + (err.splitlines()[-1] if err else "?")
    else:
        try:
            r = subprocess.run(
                [str(floor_bin), "1", "1", child], capture_output=True, timeout=60, check=False
            )
            if r.returncode == 0:
                floor, floor_reason = str(floor_bin), "built with " + cc
            else:
                floor_reason = "floor does not run: " + r.stdout.decode(errors="replace").strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            floor_reason = f"floor does not run: {e}"
    return Built(child, child_kind, floor, floor_reason, cc, notes)


# ---------------------------------------------------------------------------
# The spawners


class Unavailable(Exception):
    """This spawner cannot run here; the message says why."""


def _import_rdmaspawn() -> tuple[Any, Any]:
    """(rdmaspawn, rdmaspawn._engine): the package this benchmark belongs to."""
    import rdmaspawn
    from rdmaspawn import _engine

    return rdmaspawn, _engine


def rdmaspawn_version() -> str:
    try:
        pkg, _ = _import_rdmaspawn()
        v = getattr(pkg, "__version__", None)
        if isinstance(v, str):
            return v
    except Unavailable:
        pass
    try:
        from importlib.metadata import version

        return version("rdmaspawn")
    except Exception:  # noqa: BLE001 - not installed, or no metadata
        return "unknown"


def _preexec_noop() -> None:
    """Does nothing; its presence makes subprocess fork instead of vfork."""


@dataclass
class Spawner:
    id: str
    label: str
    call: Callable[[], None] | None  # one spawn + wait; raises on failure
    status: str = "ok"  # ok | unavailable | error
    reason: str = ""
    in_process: bool = True  # False for the floor: its own process, own memory


def _check_status(what: str, status: int) -> None:
    if status != 0:
        raise RuntimeError(f"{what}: child exit status {status}")


def make_spawners(built: Built) -> list[Spawner]:
    path = built.child
    bpath = os.fsencode(path)
    argv = [path]
    out: list[Spawner] = []

    try:
        pkg, engine = _import_rdmaspawn()
        rd_popen = pkg.Popen
        rd_spawn = engine.spawn
        rd_reason = ""
    except Unavailable as e:
        rd_popen = rd_spawn = None
        rd_reason = str(e)

    def rdmaspawn_popen() -> None:
        _check_status("rdmaspawn.Popen", rd_popen(argv).wait())

    def engine_spawn() -> None:
        pid, pidfd = rd_spawn([bpath], [bpath])
        if pidfd >= 0:
            os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        _check_status("engine", os.waitstatus_to_exitcode(status))

    def subprocess_default() -> None:
        _check_status("subprocess.Popen", subprocess.Popen(argv).wait())

    def subprocess_fork() -> None:
        _check_status("subprocess.Popen(preexec_fn)", subprocess.Popen(argv, preexec_fn=_preexec_noop).wait())  # noqa: PLW1509

    def posix_spawn() -> None:
        pid = os.posix_spawn(path, argv, os.environ)
        _, status = os.waitpid(pid, 0)
        _check_status("os.posix_spawn", os.waitstatus_to_exitcode(status))

    for sid, label, fn in (
        ("rdmaspawn", "rdmaspawn.Popen(argv).wait()", rdmaspawn_popen),
        ("engine", "rdmaspawn._engine.spawn + os.waitpid", engine_spawn),
    ):
        if rd_popen is None:
            out.append(Spawner(sid, label, None, "unavailable", rd_reason))
        else:
            out.append(Spawner(sid, label, fn))
    out.append(
        Spawner(DEFAULT_PATH, "subprocess.Popen(argv).wait() (CPython default path)", subprocess_default)
    )
    out.append(Spawner("subprocess-fork", "subprocess.Popen(argv, preexec_fn=...) (fork)", subprocess_fork))
    if hasattr(os, "posix_spawn"):
        out.append(Spawner("posix_spawn", "os.posix_spawn + os.waitpid", posix_spawn))
    else:
        out.append(
            Spawner("posix_spawn", "os.posix_spawn + os.waitpid", None, "unavailable", "no os.posix_spawn")
        )
    floor = Spawner(FLOOR, "C loop: posix_spawn + waitpid (own process)", None, in_process=False)
    if built.floor is None:
        floor.status, floor.reason = "unavailable", built.floor_reason
    out.append(floor)
    return out


# ---------------------------------------------------------------------------
# Measuring


@dataclass
class Batch:
    lat_ns: list[int]
    wall_ns: int
    cpu_ns: int


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

    workers = [threading.Thread(target=work, args=(i, lats[i]), daemon=True) for i in range(threads)]
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
    args = [floor, str(per_thread), str(threads), child] + (["pin"] if pin else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=BATCH_TIMEOUT, check=False)
    lat: list[int] = []
    wall = cpu = 0
    error = ""
    for line in r.stdout.splitlines():
        key, _, val = line.partition(" ")
        if key == "lat":
            lat.append(int(val))
        elif key == "wall_ns":
            wall = int(val)
        elif key == "cpu_ns":
            cpu = int(val)
        elif key == "error":
            error = val
    if r.returncode != 0 or error:
        raise RuntimeError(f"floor failed (status {r.returncode}): {error or r.stderr.strip()}")
    return Batch(lat, wall, cpu)


@dataclass
class Tally:
    """What one spawner gathered in one configuration."""

    lat_ns: list[int] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # spawns/s of each batch
    wall_ns: int = 0
    cpu_ns: int = 0
    spent_s: float = 0.0
    batches: int = 0
    est_s: float | None = None  # seconds per spawn, per thread, from what ran so far
    capped: bool = False
    error: str = ""
    done: bool = False


def summarize(t: Tally, in_process: bool) -> dict[str, Any]:
    xs = sorted(x / 1000 for x in t.lat_ns)
    n = len(xs)
    spawns = n
    res: dict[str, Any] = {
        "status": "error" if t.error else "ok",
        "samples": n,
        "batches": t.batches,
        "capped": t.capped,
        "median_us": quantile(xs, 0.5),
        "p10_us": quantile(xs, 0.10),
        "p25_us": quantile(xs, 0.25),
        "p75_us": quantile(xs, 0.75),
        "p90_us": quantile(xs, 0.90),
        "min_us": xs[0] if xs else math.nan,
        "max_us": xs[-1] if xs else math.nan,
        "mean_us": sum(xs) / n if n else math.nan,
        # The median of the batches' rates: one slow wake-up does not sink it.
        "throughput_per_s": quantile(sorted(t.rates), 0.5),
        "throughput_overall_per_s": spawns / (t.wall_ns / 1e9) if t.wall_ns else math.nan,
        "cpu_per_spawn_us": (t.cpu_ns / 1000) / spawns if spawns else math.nan,
        "cpu_measured_in": "parent (RUSAGE_SELF)" if in_process else "floor's own process (RUSAGE_SELF)",
    }
    if t.error:
        res["error"] = t.error
    return res


def measure_config(
    spawners: list[Spawner],
    built: Built,
    threads: int,
    iterations: int,
    time_cap: float,
    label: str,
    pin: list[int] | None = None,
    quiet: bool = False,
) -> dict[str, dict[str, Any]]:
    """Interleave the available spawners in rounds until each has `iterations`
    spawns or has spent `time_cap` seconds (with at least MIN_SAMPLES)."""
    live = [s for s in spawners if s.status == "ok"]
    tallies = {s.id: Tally() for s in live}
    target = max(iterations, threads)
    max_per_thread_round = max(1, math.ceil(target / (threads * MIN_ROUNDS)))

    def one_batch(s: Spawner, per_thread: int) -> Batch:
        if s.in_process:
            assert s.call is not None
            return run_batch_inprocess(s.call, per_thread, threads, pin)
        assert built.floor is not None
        return run_batch_floor(built.floor, built.child, per_thread, threads, bool(pin))

    # Warm-up: one unrecorded spawn each, which also proves the spawner works
    # here and gives a first estimate of its cost.
    for s in live:
        t = tallies[s.id]
        try:
            b = one_batch(s, 1)
            t.est_s = max(max(b.lat_ns) / 1e9, 1e-6)
        except Exception as e:  # noqa: BLE001 - a failing spawner is reported, not fatal
            t.error, t.done = f"{type(e).__name__}: {e}", True

    rnd = 0
    while True:
        todo = [s for s in live if not tallies[s.id].done]
        if not todo:
            break
        # Rotate the order each round, so that no spawner always follows the same one.
        k = rnd % len(todo)
        order = todo[k:] + todo[:k]
        rnd += 1
        have = sum(len(tallies[s.id].lat_ns) for s in order)
        if not quiet:
            log(f"  {label}: round {rnd}, {have} spawns so far, {len(order)} spawner(s) running")
        for s in order:
            t = tallies[s.id]
            remaining = target - len(t.lat_ns)
            est = t.est_s or 1e-3
            per_thread = min(
                max_per_thread_round,
                max(1, int(ROUND_SECONDS / est)),
                max(1, math.ceil(remaining / threads)),
            )
            if t.spent_s + per_thread * est > time_cap and len(t.lat_ns) >= MIN_SAMPLES:
                # The next batch would overrun the cap: stop with what we have.
                t.capped, t.done = True, True
                continue
            t0 = time.perf_counter()
            try:
                b = one_batch(s, per_thread)
            except Exception as e:  # noqa: BLE001 - a failing spawner is reported, not fatal
                t.error, t.done = f"{type(e).__name__}: {e}", True
                continue
            t.spent_s += time.perf_counter() - t0
            t.lat_ns.extend(b.lat_ns)
            t.wall_ns += b.wall_ns
            t.cpu_ns += b.cpu_ns
            t.batches += 1
            if b.lat_ns and b.wall_ns > 0:
                t.rates.append(len(b.lat_ns) / (b.wall_ns / 1e9))
            if b.lat_ns:
                # Per-thread seconds per spawn, from the batch's wall time.
                t.est_s = max(b.wall_ns / 1e9 / per_thread, 1e-6)
            if len(t.lat_ns) >= target:
                t.done = True
            elif t.spent_s >= time_cap and len(t.lat_ns) >= MIN_SAMPLES:
                t.capped, t.done = True, True

    results: dict[str, dict[str, Any]] = {}
    for s in spawners:
        if s.status != "ok":
            results[s.id] = {"status": s.status, "reason": s.reason}
        else:
            results[s.id] = summarize(tallies[s.id], s.in_process)
    return results


# ---------------------------------------------------------------------------
# Resident memory


class Resident:
    """`size` bytes of anonymous memory in this process, every page written,
    so that it is resident (not merely reserved) while the spawners run."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.map: mmap.mmap | None = None
        if size <= 0:
            return
        # MAP_POPULATE (Python 3.10+) faults the pages in at once, which is
        # faster; writing a byte to every page makes them resident either way.
        populate = getattr(mmap, "MAP_POPULATE", 0)
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
        page = mmap.PAGESIZE
        m[::page] = b"\x01" * len(range(0, size, page))
        self.map = m

    def close(self) -> None:
        if self.map is not None:
            self.map.close()
            self.map = None


# ---------------------------------------------------------------------------
# The machine


def describe_machine() -> dict[str, Any]:
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model") and val.strip():
                    cpu_model = val.strip()
                    break
    except OSError:
        pass
    mi = meminfo()
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    glibc = None
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        pass
    if not glibc:
        lib, ver = platform.libc_ver()
        glibc = f"{lib} {ver}".strip() or None
    u = platform.uname()
    return {
        "cpu_model": cpu_model or platform.processor() or None,
        "machine": u.machine,
        "cores_online": os.cpu_count(),
        "cores_usable": affinity,
        "mem_total_gib": round(mi.get("MemTotal", 0) / GiB, 2),
        "mem_available_gib": round(mi.get("MemAvailable", 0) / GiB, 2),
        "kernel": f"{u.system} {u.release} {u.version}",
        "glibc": glibc,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": sys.executable,
        "rdmaspawn_version": rdmaspawn_version(),
        "transparent_hugepage": read_first("/sys/kernel/mm/transparent_hugepage/enabled"),
        "overcommit_memory": read_first("/proc/sys/vm/overcommit_memory"),
        "page_size": mmap.PAGESIZE,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------
# Report


def get(results: list[dict[str, Any]], mem: float, threads: int, sid: str) -> dict[str, Any] | None:
    for r in results:
        if r["mem_gib"] == mem and r["threads"] == threads:
            s = r["spawners"].get(sid)
            if s and s.get("status") == "ok" and s.get("samples"):
                return s  # type: ignore[no-any-return]
    return None


def add_ratios(results: list[dict[str, Any]]) -> None:
    for r in results:
        sp = r["spawners"]
        floor = sp.get(FLOOR, {})
        default = sp.get(DEFAULT_PATH, {})
        for s in sp.values():
            if s.get("status") != "ok":
                continue
            s["ratio_to_floor"] = ratio(
                s["median_us"], floor.get("median_us") if floor.get("status") == "ok" else None
            )
            s["ratio_to_default"] = ratio(
                s["median_us"], default.get("median_us") if default.get("status") == "ok" else None
            )


def slopes(
    results: list[dict[str, Any]], mems: list[float], spawner_ids: list[str]
) -> dict[str, float | None]:
    """Least-squares growth of the median latency, in microseconds per GiB, at 1 thread."""
    out: dict[str, float | None] = {}
    for sid in spawner_ids:
        pts = [(m, s["median_us"]) for m in mems if (s := get(results, m, 1, sid)) is not None]
        if len(pts) < 2:
            out[sid] = None
            continue
        mx = sum(p[0] for p in pts) / len(pts)
        my = sum(p[1] for p in pts) / len(pts)
        sxx = sum((p[0] - mx) ** 2 for p in pts)
        out[sid] = None if sxx == 0 else sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    return out


def targets(results: list[dict[str, Any]], mems: list[float], threads: list[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    lat_threads = 1 if 1 in threads else min(threads)
    lo = min(mems) if mems else None

    def target(name: str, desc: str, figure: float | None, op: str, threshold: float, note: str) -> None:
        met: bool | None
        if figure is None:
            met = None
        else:
            met = figure <= threshold if op == "<=" else figure >= threshold
        out.append(
            {
                "name": name,
                "description": desc,
                "figure": figure,
                "op": op,
                "threshold": threshold,
                "met": met,
                "note": note,
            }
        )

    # Flat: latency at the largest resident size over the smallest.
    for sid, label in (("rdmaspawn", "rdmaspawn.Popen"), ("engine", "engine")):
        hi = max(mems) if mems else None
        fig = None
        note = ""
        if lo is not None and hi is not None and hi > lo:
            a, b = get(results, hi, lat_threads, sid), get(results, lo, lat_threads, sid)
            fig = ratio(a["median_us"] if a else None, b["median_us"] if b else None)
            note = f"median at {fmt_gib(hi)} / at {fmt_gib(lo)}"
            if hi < 16:
                note += " (16 GiB not measured)"
        else:
            note = "needs two resident sizes"
        target(
            f"flat ({label})", f"{label} latency, largest / smallest resident size", fig, "<=", FLAT_MAX, note
        )

    # Thin: rdmaspawn.Popen against the floor and against CPython's default path.
    if lo is not None:
        rd = get(results, lo, lat_threads, "rdmaspawn")
        fl = get(results, lo, lat_threads, FLOOR)
        df = get(results, lo, lat_threads, DEFAULT_PATH)
        where = f"median at {fmt_gib(lo)}, {lat_threads} thread(s)"
        target(
            "thin (floor)",
            "rdmaspawn.Popen(...).wait() / C posix_spawn floor",
            ratio(rd["median_us"] if rd else None, fl["median_us"] if fl else None),
            "<=",
            THIN_MAX,
            where,
        )
        target(
            "thin (CPython default)",
            "rdmaspawn.Popen(...).wait() / subprocess.Popen default path",
            ratio(rd["median_us"] if rd else None, df["median_us"] if df else None),
            "<=",
            1.0,
            where,
        )

    # Parallel: throughput with two threads over one.
    fig = None
    note = "needs --threads with 1 and 2"
    if lo is not None and 1 in threads and 2 in threads:
        one, two = get(results, lo, 1, "rdmaspawn"), get(results, lo, 2, "rdmaspawn")
        fig = ratio(two["throughput_per_s"] if two else None, one["throughput_per_s"] if one else None)
        note = f"rdmaspawn.Popen spawns/s at {fmt_gib(lo)}, 2 threads / 1 thread"
    target("parallel", "throughput of 2 threads / 1 thread", fig, ">=", PAR_MIN, note)
    return out


def render_table(report: dict[str, Any]) -> str:
    results = report["results"]
    spawners = report["spawners"]
    mems = report["settings"]["mem_gib_measured"]
    threads = report["settings"]["threads"]
    lat_threads = 1 if 1 in threads else min(threads)
    lines: list[str] = []
    w = max(len(s["id"]) for s in spawners)

    lines.append(
        f"rdmaspawn spawn benchmark - {report['machine']['python']}, "
        f"{report['machine']['cpu_model']}, {report['machine']['cores_usable']} cores, "
        f"{report['machine']['mem_total_gib']} GiB, kernel {report['machine']['kernel'].split()[1]}"
    )
    lines.append(f"child: {report['settings']['child']} ({report['settings']['child_kind']})")
    lines.append("")
    lines.append(
        f"Latency of spawn + wait, {lat_threads} thread; median [p10 .. p90]; CPU = parent's CPU per spawn;"
    )
    lines.append("x floor / x default = median over the C floor's / over subprocess.Popen's default path.")
    lines.append("The floor runs in its own small process: the resident memory is this Python")
    lines.append("process's, so the floor stays the floor (constant) at every size.")
    for mem in mems:
        lines.append("")
        lines.append(f"resident {fmt_gib(mem)}")
        lines.append(
            f"  {'spawner':<{w}}  {'median':>9}  {'p10':>9}  {'p90':>9}  {'CPU':>9}  "
            f"{'x floor':>8}  {'x default':>9}  {'n':>5}"
        )
        for s in spawners:
            r = next((r for r in results if r["mem_gib"] == mem and r["threads"] == lat_threads), None)
            f = r["spawners"].get(s["id"]) if r else None
            if not f or f.get("status") != "ok":
                why = (f or {}).get("reason") or (f or {}).get("error") or "not measured"
                lines.append(f"  {s['id']:<{w}}  {(f or {}).get('status', '-')}: {why}")
                continue
            cap = "*" if f["capped"] else " "
            lines.append(
                f"  {s['id']:<{w}}  {fmt_us(f['median_us']):>9}  {fmt_us(f['p10_us']):>9}  "
                f"{fmt_us(f['p90_us']):>9}  {fmt_us(f['cpu_per_spawn_us']):>9}  "
                f"{fmt_ratio(f.get('ratio_to_floor')):>8}  {fmt_ratio(f.get('ratio_to_default')):>9}  "
                f"{f['samples']:>5}{cap}"
            )
    if any(f.get("capped") for r in results if r["threads"] == lat_threads for f in r["spawners"].values()):
        lines.append("  (* stopped by the time cap with fewer samples)")

    sl = report.get("growth_us_per_gib") or {}
    if any(v is not None for v in sl.values()):
        lines.append("")
        lines.append("Growth of the median with resident memory (least squares, 1 thread):")
        for s in spawners:
            v = sl.get(s["id"])
            if v is not None:
                lines.append(f"  {s['id']:<{w}}  {v / 1000:+8.2f} ms per GiB")

    if len(threads) > 1 or threads != [1]:
        lines.append("")
        lines.append("Throughput, spawns/s with N threads spawning at once (xN = over 1 thread)")
        for mem in mems:
            lines.append(f"resident {fmt_gib(mem)}")
            head = "".join(f"  {str(t) + ' thr':>10}" for t in threads)
            lines.append(f"  {'spawner':<{w}}{head}")
            for s in spawners:
                cells = []
                base = get(results, mem, 1, s["id"])
                for t in threads:
                    f = get(results, mem, t, s["id"])
                    if f is None:
                        cells.append(f"  {'-':>10}")
                        continue
                    tp = f["throughput_per_s"]
                    sc = ratio(tp, base["throughput_per_s"]) if base and t != 1 else None
                    cells.append(f"  {tp:>10.0f}" if sc is None else f"  {f'{tp:.0f} x{sc:.2f}':>10}")
                lines.append(f"  {s['id']:<{w}}" + "".join(cells))

    if report["settings"]["mem_gib_skipped"]:
        lines.append("")
        for sk in report["settings"]["mem_gib_skipped"]:
            lines.append(f"skipped {fmt_gib(sk['gib'])}: {sk['reason']}")

    lines.append("")
    lines.append("Targets (figures, not assertions):")
    for t in report["targets"]:
        state = "n/a" if t["met"] is None else ("MET" if t["met"] else "MISSED")
        fig = "-" if t["figure"] is None else f"{t['figure']:.2f}"
        lines.append(
            f"  {t['name']:<24} {fig:>6} (want {t['op']} {t['threshold']:g})  {state:<6}  {t['note']}"
        )

    noisy = [
        f
        for m in mems
        if (f := get(results, m, lat_threads, FLOOR)) is not None and f["p90_us"] > 5 * f["p10_us"]
    ]
    if noisy and not report["settings"].get("pin"):
        f = noisy[0]
        lines.append("")
        lines.append(
            f"Note: the C floor itself is spread wide (p10 {fmt_us(f['p10_us'])}, p90 {fmt_us(f['p90_us'])}):"
        )
        lines.append("the machine adds latency to the spawns, often the wake-up of an idle CPU on a VM.")
        lines.append("Medians and ratios are then noisy; --pin runs the child on the parent's CPU.")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> str | None:
    """Latency vs resident memory for every spawner (and throughput vs threads).
    Returns None on success, or why there is no plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'rdmaspawn[bench]'): no plot"
    results = report["results"]
    mems = report["settings"]["mem_gib_measured"]
    threads = report["settings"]["threads"]
    lat_threads = 1 if 1 in threads else min(threads)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for s in report["spawners"]:
        pts = [(m, f) for m in mems if (f := get(results, m, lat_threads, s["id"])) is not None]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        med = [p[1]["median_us"] for p in pts]
        lo = [p[1]["median_us"] - p[1]["p10_us"] for p in pts]
        hi = [p[1]["p90_us"] - p[1]["median_us"] for p in pts]
        ax1.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=s["id"])
        lo_mem = min(mems)
        tps = [(t, f) for t in threads if (f := get(results, lo_mem, t, s["id"])) is not None]
        if tps:
            ax2.plot([t for t, _ in tps], [f["throughput_per_s"] for _, f in tps], marker="o", label=s["id"])
    ax1.set_xlabel("parent resident memory (GiB)")
    ax1.set_ylabel("spawn + wait latency, median (us); bars p10..p90")
    ax1.set_yscale("log")
    ax1.set_title(f"Latency vs resident memory ({lat_threads} thread)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize="small")
    ax2.set_xlabel("threads spawning at once")
    ax2.set_ylabel("spawns per second")
    ax2.set_title(f"Throughput at {fmt_gib(min(mems))} resident")
    ax2.set_xticks(threads)
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize="small")
    m = report["machine"]
    fig.suptitle(
        f"rdmaspawn {m['rdmaspawn_version']} - {m['python']} - {m['cpu_model']} - {m['cores_usable']} cores",
        fontsize="small",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------
# Command line


def _floats(text: str) -> list[float]:
    try:
        vals = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not vals or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError("sizes must be >= 0")
    return vals


def _ints(text: str) -> list[int]:
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError("thread counts must be >= 1")
    return vals


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="rdmaspawn bench",
        description="Spawn + wait latency and throughput of rdmaspawn, CPython's subprocess paths, "
        "os.posix_spawn and a C posix_spawn floor, swept over the parent's resident memory "
        "and the number of threads spawning at once.",
    )
    p.add_argument(
        "--out", type=Path, default=Path("bench-out"), help="output directory (default ./bench-out)"
    )
    p.add_argument(
        "--mem-gib",
        type=_floats,
        default=None,
        help="resident memory sizes in GiB, comma-separated (default 0,1,4,16; --quick 0,1); "
        "sizes that do not fit in MemAvailable minus a margin are skipped",
    )
    p.add_argument(
        "--threads",
        type=_ints,
        default=None,
        help="threads spawning at once, comma-separated (default 1,2,4; --quick 1,2)",
    )
    p.add_argument(
        "--iterations",
        type=_positive,
        default=None,
        help=f"spawns per spawner per configuration (default {DEFAULT_ITERATIONS}; --quick "
        f"{QUICK_ITERATIONS}); slow spawners stop earlier at the time cap",
    )
    p.add_argument(
        "--time-cap",
        type=float,
        default=None,
        help=f"seconds of spawning per spawner per configuration before it stops with what it "
        f"has (default {DEFAULT_TIME_CAP:g}; --quick {QUICK_TIME_CAP:g})",
    )
    p.add_argument("--quick", action="store_true", help="a short run (under a minute on 2 cores)")
    p.add_argument(
        "--json", type=Path, default=None, help="JSON results path (default OUT/spawn_latency.json)"
    )
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
    p.add_argument(
        "--pin",
        action="store_true",
        help="give each spawning thread a CPU of its own, shared with its children (the floor's "
        "threads too); on VMs where waking an idle vCPU costs a scheduler tick this takes that "
        "noise out of the figures",
    )
    a = p.parse_args(argv)
    if a.mem_gib is None:
        a.mem_gib = list(QUICK_MEM_GIB if a.quick else DEFAULT_MEM_GIB)
    if a.threads is None:
        a.threads = list(QUICK_THREADS if a.quick else DEFAULT_THREADS)
    if a.iterations is None:
        a.iterations = QUICK_ITERATIONS if a.quick else DEFAULT_ITERATIONS
    if a.time_cap is None:
        a.time_cap = QUICK_TIME_CAP if a.quick else DEFAULT_TIME_CAP
    if a.json is None:
        a.json = a.out / "spawn_latency.json"
    return a


def _clean(x: Any) -> Any:
    """NaN is not JSON: write null instead."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    # preexec_fn in a process with threads is exactly what this benchmark
    # measures; CPython's warning about it is not news here.
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
    warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*preexec_fn.*")

    args.out.mkdir(parents=True, exist_ok=True)
    machine = describe_machine()
    log(
        f"rdmaspawn bench: {machine['python']}, {machine['cores_usable']} cores, "
        f"{machine['mem_available_gib']} GiB available"
    )

    with tempfile.TemporaryDirectory(prefix="rdmaspawn-bench-") as tmp:
        log("building the no-op child and the C floor ...")
        built = build(Path(tmp))
        for n in built.notes:
            log("note: " + n)
        spawners = make_spawners(built)
        for s in spawners:
            if s.status != "ok":
                log(f"{s.id}: unavailable - {s.reason}")

        # Unrecorded: the first configuration would otherwise also pay for
        # cold caches, lazy imports and the CPU's frequency ramp.
        log("warming up ...")
        measure_config(spawners, built, 1, WARMUP_SPAWNS, WARMUP_SECONDS, "warm-up", quiet=True)

        configs = [(m, t) for m in args.mem_gib for t in args.threads]
        base_cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        results: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        measured: list[float] = []
        i = 0
        for mem in args.mem_gib:
            size = int(mem * GiB)
            mi = meminfo()
            avail = mi.get("MemAvailable", 0)
            room = avail - safety_margin(mi.get("MemTotal", 0))
            if size > 0 and size > room:
                reason = (
                    f"needs {fmt_gib(mem)}, MemAvailable is {avail / GiB:.1f} GiB and "
                    f"{safety_margin(mi.get('MemTotal', 0)) / GiB:.1f} GiB stay free"
                )
                log(f"skipping {fmt_gib(mem)}: {reason}")
                skipped.append({"gib": mem, "reason": reason})
                i += len(args.threads)
                continue
            if size:
                log(f"touching {fmt_gib(mem)} of resident memory ...")
            t0 = time.monotonic()
            try:
                resident = Resident(size)
            except (OSError, MemoryError, ValueError) as e:
                reason = f"cannot map {fmt_gib(mem)}: {e}"
                log(f"skipping {fmt_gib(mem)}: {reason}")
                skipped.append({"gib": mem, "reason": reason})
                i += len(args.threads)
                continue
            touch_s = time.monotonic() - t0
            measured.append(mem)
            try:
                for threads in args.threads:
                    i += 1
                    label = f"[{i}/{len(configs)}] {fmt_gib(mem)}, {threads} thread(s)"
                    log(f"{label} ...")
                    gc.collect()
                    cpus = base_cpus[:threads] if args.pin and base_cpus else None
                    c0 = time.monotonic()
                    res = measure_config(
                        spawners, built, threads, args.iterations, args.time_cap, label, cpus
                    )
                    log(f"{label} done in {time.monotonic() - c0:.1f} s")
                    results.append(
                        {
                            "mem_gib": mem,
                            "threads": threads,
                            "touch_s": round(touch_s, 3),
                            "resident_bytes": size,
                            "cpus": cpus,
                            "spawners": res,
                        }
                    )
            finally:
                resident.close()

    add_ratios(results)
    errors = sorted({sid for r in results for sid, f in r["spawners"].items() if f.get("status") == "error"})
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "machine": machine,
        "settings": {
            "mem_gib_requested": args.mem_gib,
            "mem_gib_measured": measured,
            "mem_gib_skipped": skipped,
            "threads": args.threads,
            "iterations": args.iterations,
            "time_cap_s": args.time_cap,
            "quick": args.quick,
            "pin": args.pin,
            "child": built.child,
            "child_kind": built.child_kind,
            "cc": built.cc,
            "floor": built.floor_reason,
            "memory_safety_margin_gib": round(safety_margin(meminfo().get("MemTotal", 0)) / GiB, 2),
        },
        "spawners": [
            {
                "id": s.id,
                "label": s.label,
                "status": s.status,
                "reason": s.reason,
                "in_parent_process": s.in_process,
            }
            for s in spawners
        ],
        "results": results,
        "growth_us_per_gib": slopes(results, measured, [s.id for s in spawners]),
        "targets": [],
        "notes": built.notes
        + [
            "Latency is spawn + wait of a static no-op child, timed around each call.",
            (
                "The floor runs as its own small process: the resident memory is this Python process's, "
                "so the floor's figures are the floor (constant) at every size, and its CPU per spawn is "
                "measured inside its own process."
            ),
            (
                "CPU per spawn is the parent's user+system time (RUSAGE_SELF, all threads) over the "
                "batches divided by the spawns; the children's CPU is not in it."
            ),
            (
                "Throughput (throughput_per_s) is the median over batches of spawns / wall time, N threads "
                "spawning at once; throughput_overall_per_s is all spawns / all batches' wall time."
            ),
        ],
    }
    report["targets"] = targets(results, measured, args.threads)
    report["plot"] = None
    report["duration_s"] = round(time.monotonic() - started, 1)

    if not measured:
        log("nothing measured: no resident size fits")
    print(render_table(report) if measured else "nothing measured")

    if not args.no_plot and measured:
        png = args.out / "spawn_latency.png"
        why = plot(report, png)
        if why:
            log(why)
            report["plot"] = None
        else:
            report["plot"] = str(png)
            log(f"plot: {png}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(_clean(report), indent=2) + "\n")
    log(f"json: {args.json}")
    log(f"done in {report['duration_s']} s")
    if errors:
        log("spawners that failed: " + ", ".join(errors))
        return 1
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
