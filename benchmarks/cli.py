"""``rdmaspawn bench``: measure, or re-render a JSON record, and write the report.

The exit status is 1 only when a spawner failed or nothing was measured:
targets are figures, never assertions.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from .analysis import analyse
from .build import build
from .machine import describe_machine, meminfo
from .model import ERROR, OK, SCHEMA, Report, ReportFormatError, Settings, read_json, write_json
from .numbers import GiB, log
from .outdir import OutDirError, make_out_dir
from .plot import plot
from .readme import MarkerError, render_block, splice
from .spawners import make_spawners
from .sweep import safety_margin, sweep
from .table import render_table

JSON_NAME = "spawn_latency.json"
PNG_NAME = "spawn_latency.png"

# Each sweep option's (default, --quick); 2000 spawns: enough that a 4-thread
# throughput batch is long enough to compare.
DEFAULTS: dict[str, tuple[Any, Any]] = {
    "mem_gib": ([0.0, 1.0, 4.0, 16.0], [0.0, 1.0]), "threads": ([1, 2, 4], [1, 2, 4]),
    "iterations": (2000, 200), "time_cap": (20.0, 1.5)}

NOTES = [
    "Latency is spawn + wait of a static no-op child, timed around each call.",
    "The floor runs as its own small process: the resident memory is this Python process's, "
    "so the floor's figures are the floor (constant) at every size, and its CPU per spawn is "
    "measured inside its own process.",
    "CPU per spawn is the parent's user+system time (RUSAGE_SELF, all threads) over the "
    "batches divided by the spawns; the children's CPU is not in it.",
    "Throughput (throughput_per_s) is the median over batches of spawns / wall time, N threads "
    "spawning at once; throughput_overall_per_s is all spawns / all batches' wall time.",
]


def _number_list(kind: type[float], least: float, what: str) -> Callable[[str], list[Any]]:
    """A parser of sorted comma-separated lists of `kind` numbers, each >= least."""
    def parse(text: str) -> list[Any]:
        try:
            vals = sorted({kind(x) for x in text.split(",") if x.strip()})
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a comma-separated list of {what}: {text!r}") from None
        if not vals or any(v < least for v in vals):
            raise argparse.ArgumentTypeError(f"each must be >= {least:g}")
        return vals
    return parse


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def _defaults(key: str) -> str:
    return "default {}; --quick {}".format(*(
        ",".join(f"{v:g}" for v in d) if isinstance(d, list) else f"{d:g}" for d in DEFAULTS[key]))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="rdmaspawn bench",
        description="Spawn + wait latency and throughput of rdmaspawn, CPython's subprocess "
        "paths, os.posix_spawn and a C posix_spawn floor, swept over the parent's resident "
        "memory and the number of threads spawning at once.",
    )
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default: a new ./rdmaspawn-bench-YYYYMMDD-HHMMSS, or under "
                   "$TMPDIR when the current directory is / or not writable)")
    p.add_argument("--json", type=Path, default=None,
                   help=f"JSON results path (default OUT/{JSON_NAME})")
    p.add_argument("--readme", type=Path, default=None,
                   help="rewrite the block between <!-- bench:begin --> and <!-- bench:end --> "
                   "in this Markdown file from the results")
    p.add_argument("--from-json", type=Path, default=None, metavar="FILE",
                   help="measure nothing: re-render the table (and --readme, --json, and the plot "
                   "into --out if given) from a JSON record")
    p.add_argument("--quick", action="store_true", help="a short run (under a minute on 2 cores)")
    p.add_argument("--mem-gib", type=_number_list(float, 0, "numbers"), default=None,
                   help=f"resident memory sizes in GiB, comma-separated ({_defaults('mem_gib')}); sizes that do not fit in MemAvailable minus "
                   "a margin are skipped")
    p.add_argument("--threads", type=_number_list(int, 1, "integers"), default=None,
                   help=f"threads spawning at once, comma-separated ({_defaults('threads')})")
    p.add_argument("--iterations", type=_positive, default=None,
                   help=f"spawns per spawner per configuration ({_defaults('iterations')}); slow spawners stop earlier at the time cap")
    p.add_argument("--time-cap", type=float, default=None,
                   help="seconds of spawning per spawner per configuration before it stops with "
                   f"what it has ({_defaults('time_cap')})")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
    p.add_argument("--pin", action="store_true",
                   help="give each spawning thread a CPU of its own, shared with its children (the "
                   "floor's threads too); on VMs where waking an idle vCPU costs a scheduler tick "
                   "this takes that noise out of the figures")
    a = p.parse_args(argv)
    for key, both in DEFAULTS.items():
        if getattr(a, key) is None:
            setattr(a, key, both[a.quick])
    if a.readme is not None:
        try:
            splice(a.readme.read_text(), "")  # fail now, not after a long run
        except OSError as e:
            p.error(f"--readme {a.readme}: {e.strerror}")
        except MarkerError as e:
            p.error(f"--readme {a.readme}: {e}")
    return a


def _ref(path: Path, readme: Path) -> str:
    """How the page names a file: relative to the page's folder where it is inside it."""
    rel = os.path.relpath(path.resolve(), readme.resolve().parent)
    return str(path) if rel.startswith("..") else rel


def measure(args: argparse.Namespace, started: float) -> Report:
    # preexec_fn in a process with threads is exactly what this benchmark
    # measures; CPython's warning about it is not news here.
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
    warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*preexec_fn.*")
    machine = describe_machine()
    log(f"rdmaspawn bench: {machine.python}, {machine.cores_usable} cores, "
        f"{machine.mem_available_gib} GiB available")
    with tempfile.TemporaryDirectory(prefix="rdmaspawn-bench-build-") as tmp:
        log("building the no-op child and the C floor ...")
        built = build(Path(tmp))
        for n in built.notes:
            log("note: " + n)
        spawners = make_spawners(built)
        for s in spawners:
            if s.status != OK:
                log(f"{s.id}: unavailable - {s.reason}")
        results, measured, skipped = sweep(spawners, built, args.mem_gib, args.threads,
                                           args.iterations, args.time_cap, args.pin)
    settings = Settings(
        mem_gib_requested=args.mem_gib, mem_gib_measured=measured, mem_gib_skipped=skipped,
        threads=args.threads, iterations=args.iterations, time_cap_s=args.time_cap,
        quick=args.quick, pin=args.pin, child=built.child,
        child_kind=built.child_kind, cc=built.cc, floor=built.floor_reason,
        memory_safety_margin_gib=round(safety_margin(meminfo().get("MemTotal", 0)) / GiB, 2),
    )
    report = Report(SCHEMA, machine, settings, [s.info() for s in spawners], results,
                    {}, [], built.notes + NOTES)
    analyse(report)
    report.duration_s = round(time.monotonic() - started, 1)
    return report


def _write(report: Report, args: argparse.Namespace, out: Path | None, json_path: Path,
           record: Path | None) -> None:
    """Print the table, then write the plot into `out`, the JSON (a run's always; a
    re-render's only with --json) and the docs block."""
    print(render_table(report) if report.settings.mem_gib_measured else "nothing measured")
    png = None
    if out is not None and not args.no_plot and report.settings.mem_gib_measured:
        why = plot(report, out / PNG_NAME)
        png = None if why else out / PNG_NAME
        log(why or f"plot: {png}")
        report.plot = None if why else str(png)
    if record is None or args.json is not None:
        write_json(report, json_path)
        log(f"json: {json_path}")
    if args.readme is not None:
        if png is None and record is not None:
            png = record.with_name(PNG_NAME)  # the plot of the record's own run
        png_ref = _ref(png, args.readme) if png is not None and png.exists() else None
        block = render_block(report, _ref(json_path, args.readme), png_ref)
        args.readme.write_text(splice(args.readme.read_text(), block))
        log(f"bench block: {args.readme}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    try:
        out = make_out_dir(args.out) if args.out is not None or args.from_json is None else None
    except OutDirError as e:
        log(f"rdmaspawn bench: {e}")
        return 2

    if args.from_json is not None:
        try:
            report = read_json(args.from_json)
        except (OSError, ReportFormatError) as e:
            log(f"rdmaspawn bench: --from-json {args.from_json}: {e}")
            return 2
        if report.schema != SCHEMA:
            # An older record: its figures stand, the targets are this version's.
            analyse(report)
            report.notes.append(f"Read from a {report.schema} record; ratios and targets "
                                f"recomputed from its figures by the {SCHEMA} benchmark.")
            report.schema = SCHEMA
        _write(report, args, out, args.json or args.from_json, args.from_json)
        return 0

    assert out is not None
    log(f"output folder: {out}")
    report = measure(args, started)
    _write(report, args, out, args.json or out / JSON_NAME, None)
    log(f"done in {round(time.monotonic() - started, 1)} s; files in {out}")
    failed = sorted({sid for r in report.results for sid, f in r.spawners.items()
                     if f.status == ERROR})
    if failed:
        log("spawners that failed: " + ", ".join(failed))
        return 1
    return 0 if report.settings.mem_gib_measured else 1
