"""What one benchmark run found, as dataclasses, written to JSON and read back (of every
schema: cli.py recomputes an older record's targets).  A figure not measured is None, never NaN.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

# /2 added the throughput targets, /3 the CPU ones and each batch's CPU per
# spawn, /4 "flat" over the floor beside it (analysis.py).
SCHEMA = "rdmaspawn-bench/4"
READABLE_SCHEMAS = tuple(f"rdmaspawn-bench/{n}" for n in range(1, 5))

FLOOR = "floor"  # the C posix_spawn loop, in its own process
DEFAULT_PATH = "subprocess"  # CPython's subprocess.Popen, default path
RDMASPAWN = "rdmaspawn"  # rdmaspawn.Popen
ENGINE = "engine"  # rdmaspawn._native.engine.spawn
PATCHED = "subprocess-patched"  # subprocess.Popen on what rdmaspawn.patch() puts under it

# Spawner states, in SpawnerInfo.status and Figures.status.
OK = "ok"
UNAVAILABLE = "unavailable"
ERROR = "error"


@dataclass
class Figures:
    """One spawner in one configuration (resident size, threads)."""

    status: str  # OK, UNAVAILABLE (never ran here) or ERROR (failed while running)
    samples: int = 0
    batches: int = 0
    capped: bool = False  # stopped by the time cap with fewer samples
    median_us: float | None = None
    p10_us: float | None = None
    p25_us: float | None = None
    p75_us: float | None = None
    p90_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    mean_us: float | None = None
    # The median over batches of spawns / wall time: one slow wake-up does not sink it.
    throughput_per_s: float | None = None
    throughput_overall_per_s: float | None = None  # all spawns / all batches' wall time
    # Per batch, in round order: the spawners' k-th batches ran in the same round,
    # so their ratios show how much two spawners' figures move together.
    batch_median_us: list[float] = field(default_factory=list)
    batch_throughput_per_s: list[float] = field(default_factory=list)
    batch_cpu_per_spawn_us: list[float] = field(default_factory=list)  # empty before /3
    cpu_per_spawn_us: float | None = None
    cpu_measured_in: str = ""
    ratio_to_floor: float | None = None  # median / the C floor's median
    ratio_to_default: float | None = None  # median / subprocess.Popen's median
    reason: str = ""  # why UNAVAILABLE
    error: str = ""  # what failed, for ERROR

    @property
    def measured(self) -> bool:
        return self.status == OK and self.samples > 0


@dataclass
class ConfigResult:
    mem_gib: float
    threads: int
    touch_s: float  # seconds it took to make the resident memory resident
    resident_bytes: int
    cpus: list[int] | None  # the CPUs the spawning threads were pinned to (--pin)
    spawners: dict[str, Figures]


@dataclass
class SpawnerInfo:
    id: str
    label: str  # what one spawn is, in Python: "rdmaspawn.Popen(argv).wait()"
    status: str
    reason: str = ""
    in_parent_process: bool = True  # False for the floor


@dataclass
class Machine:
    cpu_model: str | None
    machine: str
    cores_online: int | None
    cores_usable: int | None
    mem_total_gib: float
    mem_available_gib: float
    kernel: str
    glibc: str | None
    python: str
    python_executable: str
    rdmaspawn_version: str
    transparent_hugepage: str | None
    overcommit_memory: str | None
    page_size: int
    timestamp: str  # ISO 8601, UTC
    # The commit of the measured code where it ran from a git checkout
    # ("3927401", "3927401 + uncommitted changes"), else None.
    rdmaspawn_commit: str | None = None

    @property
    def kernel_release(self) -> str:
        return self.kernel.split()[1] if " " in self.kernel else self.kernel


@dataclass
class Skipped:
    gib: float
    reason: str


@dataclass
class Settings:
    mem_gib_requested: list[float]
    mem_gib_measured: list[float]
    mem_gib_skipped: list[Skipped]
    threads: list[int]
    iterations: int
    time_cap_s: float
    quick: bool
    pin: bool
    child: str
    child_kind: str
    cc: str | None
    floor: str  # how the floor was built, or why there is none
    memory_safety_margin_gib: float

    @property
    def latency_threads(self) -> int:
        """The thread count latency is reported at: 1 where it was measured."""
        return 1 if 1 in self.threads else min(self.threads)


@dataclass
class Target:
    """A figure asked of rdmaspawn, with the verdict of this run."""

    name: str
    description: str
    figure: float | None
    op: str  # "<=" or ">="
    threshold: float
    met: bool | None  # None: not measured in this run
    note: str
    # For side-by-side comparisons: the 25th and 75th percentiles of the same
    # ratio taken round by round, i.e. how far noise moves the figure.
    round_ratio_p25_p75: list[float] | None = None


@dataclass
class Report:
    schema: str
    machine: Machine
    settings: Settings
    spawners: list[SpawnerInfo]
    results: list[ConfigResult]
    growth_us_per_gib: dict[str, float | None]
    targets: list[Target]
    notes: list[str] = field(default_factory=list)
    plot: str | None = None
    duration_s: float = 0.0

    def figures(self, mem: float, threads: int, sid: str) -> Figures | None:
        """The measured figures of one spawner in one configuration, or None."""
        for r in self.results:
            if r.mem_gib == mem and r.threads == threads:
                f = r.spawners.get(sid)
                return f if f is not None and f.measured else None
        return None


def _finite(x: Any) -> Any:
    """NaN and infinities are not JSON: null instead."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def write_json(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(dataclasses.asdict(report)), indent=2) + "\n")


class ReportFormatError(ValueError):
    """The file is not a benchmark report this version can read."""


_T = TypeVar("_T")


def _build(cls: type[_T], d: dict[str, Any]) -> _T:
    """cls(**d) with the keys cls knows; a missing required key is a format error."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    try:
        return cls(**{k: v for k, v in d.items() if k in names})
    except TypeError as e:
        raise ReportFormatError(f"{cls.__name__}: {e}") from None


def read_json(path: Path) -> Report:
    """A Report from its JSON record (any readable schema)."""
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportFormatError(f"{path}: not JSON: {e}") from None
    if not isinstance(d, dict) or d.get("schema") not in READABLE_SCHEMAS:
        got = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise ReportFormatError(f"not a benchmark report of a readable schema: {got!r}")
    try:
        settings = dict(d["settings"])
        settings["mem_gib_skipped"] = [_build(Skipped, s) for s in settings["mem_gib_skipped"]]
        results = []
        for r in d["results"]:
            r = dict(r)
            r["spawners"] = {k: _build(Figures, v) for k, v in r["spawners"].items()}
            results.append(_build(ConfigResult, r))
        return Report(
            schema=d["schema"],
            machine=_build(Machine, d["machine"]),
            settings=_build(Settings, settings),
            spawners=[_build(SpawnerInfo, s) for s in d["spawners"]],
            results=results,
            growth_us_per_gib=dict(d.get("growth_us_per_gib") or {}),
            targets=[_build(Target, t) for t in d.get("targets") or []],
            notes=list(d.get("notes") or []),
            plot=d.get("plot"),
            duration_s=float(d.get("duration_s") or 0.0),
        )
    except (KeyError, TypeError, AttributeError) as e:
        raise ReportFormatError(f"malformed report: {type(e).__name__}: {e}") from None

