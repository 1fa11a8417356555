"""What a run's figures say: ratios, growth per GiB, and the targets asked of rdmaspawn.

The verdicts are computed once, into the report's targets: the table, the
JSON and the docs block print them and never judge a figure again.  Against
subprocess.Popen, latency and throughput allow NOISE_ALLOWANCE (two medians of
the same code, side by side on a shared machine, still differ by a few
percent; the CPU per spawn none, as issue 29 asks); the round-by-round ratio
in their notes (p25 .. p75) shows where the noise is larger than that.
"""

from __future__ import annotations

from .model import DEFAULT_PATH, ENGINE, FLOOR, PATCHED, RDMASPAWN, Report, Target
from .numbers import fmt_gib, quantile, ratio

FLAT_MAX = 1.10  # rdmaspawn latency at the largest resident size / at the smallest
THIN_FLOOR_MAX = 1.10  # rdmaspawn.Popen latency / the C floor's, and the engine's (issue 29)
NOISE_ALLOWANCE = 0.05  # what "1.0 within noise" allows, side by side in one run
LATENCY_VS_DEFAULT_MAX = 1.0 + NOISE_ALLOWANCE  # rdmaspawn.Popen / subprocess.Popen latency
THROUGHPUT_VS_DEFAULT_MIN = 1.0 - NOISE_ALLOWANCE  # rdmaspawn.Popen / subprocess.Popen spawns/s
CPU_VS_DEFAULT_MAX = 1.0  # rdmaspawn's parent CPU per spawn / subprocess.Popen's, as measured
THROUGHPUT_THREADS = (2, 4)  # thread counts the throughput comparison is made at
PARALLEL_MIN = 1.6  # rdmaspawn.Popen spawns/s with 2 threads / with 1
MIN_ROUNDS_FOR_SPREAD = 4  # rounds below which a round-by-round spread says nothing

FLAT_SPAWNERS = ((RDMASPAWN, "rdmaspawn.Popen"), (ENGINE, "engine"))


def analyse(report: Report) -> None:
    """Fill in the derived figures: each spawner's median over the floor's and over
    subprocess.Popen's (per configuration), growth per GiB and the targets."""
    for r in report.results:
        medians = {sid: f.median_us for sid, f in r.spawners.items() if f.measured}
        for f in r.spawners.values():
            if f.measured:
                f.ratio_to_floor = ratio(f.median_us, medians.get(FLOOR))
                f.ratio_to_default = ratio(f.median_us, medians.get(DEFAULT_PATH))
    report.growth_us_per_gib = growth_per_gib(report)
    report.targets = targets(report)


def growth_per_gib(report: Report) -> dict[str, float | None]:
    """Least-squares growth of each spawner's median latency, in us per GiB, at the latency
    thread count; None with fewer than two sizes."""
    out: dict[str, float | None] = {}
    for s in report.spawners:
        pts = [(m, y) for m in report.settings.mem_gib_measured
               if (y := _figure(report, m, report.settings.latency_threads, s.id)) is not None]
        mx = sum(x for x, _ in pts) / (len(pts) or 1)
        my = sum(y for _, y in pts) / (len(pts) or 1)
        sxx = sum((x - mx) ** 2 for x, _ in pts)  # 0 with fewer than two sizes
        out[s.id] = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None
    return out


def growth_ms(report: Report) -> dict[str, float]:
    """The growths per GiB measured, in ms to two places; + 0.0: -0.001 shows as +0.00."""
    return {sid: round(v / 1000, 2) + 0.0 for sid, v in report.growth_us_per_gib.items()
            if v is not None}


def _target(name: str, description: str, op: str, threshold: float, figure: float | None,
            note: str, spread: list[float] | None = None) -> Target:
    met: bool | None = None
    if figure is not None:
        met = figure <= threshold if op == "<=" else figure >= threshold
    if spread is not None:
        note += f"; round by round {spread[0]:.2f} .. {spread[1]:.2f} (p25 .. p75)"
    return Target(name, description, figure, op, threshold, met, note, spread)


def round_ratio_spread(a: list[float], b: list[float]) -> list[float] | None:
    """[p25, p75] of a[k] / b[k], the two spawners' batches of round k; None with
    fewer than MIN_ROUNDS_FOR_SPREAD rounds."""
    ratios = sorted(x / y for x, y in zip(a, b) if y > 0)
    if len(ratios) < MIN_ROUNDS_FOR_SPREAD:
        return None
    p25, p75 = quantile(ratios, 0.25), quantile(ratios, 0.75)
    return None if p25 is None or p75 is None else [round(p25, 4), round(p75, 4)]


def _vs_default(report: Report, name: str, description: str, op: str, threshold: float,
                threads: int, figure: str, note: str, sid: str = RDMASPAWN) -> Target:
    """Spawner ``sid`` over subprocess.Popen at the smallest size, side by side on
    ``figure``, with the ratio's round-by-round spread (from ``batch_`` + figure)."""
    lo = min(report.settings.mem_gib_measured)
    rd = report.figures(lo, threads, sid)
    df = report.figures(lo, threads, DEFAULT_PATH)
    if rd is None or df is None:
        return _target(name, description, op, threshold, None, note)
    batches = "batch_" + figure
    return _target(name, description, op, threshold,
                   ratio(getattr(rd, figure), getattr(df, figure)), note,
                   round_ratio_spread(getattr(rd, batches), getattr(df, batches)))


def _figure(report: Report, mem: float, threads: int, sid: str,
            figure: str = "median_us") -> float | None:
    f = report.figures(mem, threads, sid)
    return getattr(f, figure) if f is not None else None


def _flat(report: Report, sid: str, lo: float, hi: float, threads: int
          ) -> tuple[float | None, str]:
    """Spawner ``sid``'s growth from the smallest resident size to the largest:
    (the figure, its note).  Two sizes are measured minutes apart, so a machine
    that drifts in between reads as growth; the C floor runs in the same rounds
    at each size, out of the resident memory's reach, so the figure is the
    spawner's median over the floor's at the largest size over the same at the
    smallest.  Without the floor's figures, the plain medians' ratio, said so."""
    if not hi > lo:
        return None, "needs two resident sizes"
    at_hi, at_lo = _figure(report, hi, threads, sid), _figure(report, lo, threads, sid)
    plain = ratio(at_hi, at_lo)
    floor_hi, floor_lo = (_figure(report, hi, threads, FLOOR),
                          _figure(report, lo, threads, FLOOR))
    where = f"at {fmt_gib(hi)} / at {fmt_gib(lo)}, {threads} thread(s)"
    drift = ratio(floor_hi, floor_lo)
    if plain is None or drift is None:
        return plain, f"median {where} (no floor figures to take the machine's drift out)"
    return (ratio(ratio(at_hi, floor_hi), ratio(at_lo, floor_lo)),
            f"median over the C floor's, {where}; the plain medians' ratio "
            f"{plain:.2f}, the floor's own {drift:.2f}")


def targets(report: Report) -> list[Target]:
    s = report.settings
    if not s.mem_gib_measured:
        return []
    lo, hi = min(s.mem_gib_measured), max(s.mem_gib_measured)
    n = s.latency_threads
    out = [_target(f"flat ({label})", f"{label} latency, largest / smallest resident size",
                   "<=", FLAT_MAX, *_flat(report, sid, lo, hi, n))
           for sid, label in FLAT_SPAWNERS]

    where = f"median at {fmt_gib(lo)}, {n} thread(s)"
    floor = _figure(report, lo, n, FLOOR)
    out += [_target(name, f"{what} / C posix_spawn floor", "<=", THIN_FLOOR_MAX,
                    ratio(_figure(report, lo, n, sid), floor), where)
            for sid, name, what in (
                (RDMASPAWN, "thin (floor)", "rdmaspawn.Popen(...).wait()"),
                (ENGINE, "thin (engine / floor)", "rdmaspawn._native.engine.spawn + os.waitpid"))]
    noise = f"1.0 wanted, {NOISE_ALLOWANCE:g} allowed for noise"
    out.append(_vs_default(
        report, "latency vs subprocess",
        "rdmaspawn.Popen(...).wait() / subprocess.Popen(...).wait(), CPython's default path",
        "<=", LATENCY_VS_DEFAULT_MAX, n, "median_us", f"{where}; {noise}"))
    out += [_vs_default(
        report, f"throughput vs subprocess ({t} threads)",
        f"rdmaspawn.Popen spawns/s / subprocess.Popen spawns/s, {t} threads spawning",
        ">=", THROUGHPUT_VS_DEFAULT_MIN, t, "throughput_per_s",
        f"spawns/s at {fmt_gib(lo)}, {t} threads at once; {noise}" if t in s.threads
        else f"not measured: needs --threads with {t}") for t in THROUGHPUT_THREADS]
    out += [_vs_default(
        report, name, f"{what} CPU per spawn / stock subprocess.Popen's, the spawning process's",
        "<=", CPU_VS_DEFAULT_MAX, n, "cpu_per_spawn_us",
        f"CPU per spawn (RUSAGE_SELF) at {fmt_gib(lo)}, {n} thread(s); 1.0 wanted, no allowance"
        if report.figures(lo, n, sid) is not None else "not measured in this record", sid)
        for sid, name, what in ((RDMASPAWN, "CPU per spawn <= CPython's", "rdmaspawn.Popen's"),
                                (PATCHED, "CPU per spawn <= CPython's, patch()",
                                 "subprocess.Popen's under patch()"))]

    out.append(_target(
        "parallel", "throughput of 2 threads / 1 thread", ">=", PARALLEL_MIN,
        ratio(_figure(report, lo, 2, RDMASPAWN, "throughput_per_s"),
              _figure(report, lo, 1, RDMASPAWN, "throughput_per_s")),
        f"rdmaspawn.Popen spawns/s at {fmt_gib(lo)}, 2 threads / 1 thread"
        if 1 in s.threads and 2 in s.threads else "not measured: needs --threads with 1 and 2"))
    return out


def throughput_cells(report: Report, mem: float, sid: str, over: str) -> list[str]:
    """Per thread count, the spawns/s and (but on the 1-thread figure) ``over``
    formatted with its ratio to 1 thread's; "-" where not measured."""
    one = _figure(report, mem, 1, sid, "throughput_per_s")
    cells = []
    for t in report.settings.threads:
        tp = _figure(report, mem, t, sid, "throughput_per_s")
        cells.append("-" if tp is None
                     else f"{tp:.0f}" + (over.format(tp / one) if t != 1 and one else ""))
    return cells


# The C floor's p90 over its p10 beyond which the machine itself is adding
# latency to spawns (on VMs, often the wake-up of an idle vCPU).
NOISY_FLOOR_SPREAD = 5.0


def noisy_floor(report: Report) -> tuple[float, float] | None:
    """(p10, p90) of the first size whose floor is spread wide, or None."""
    for m in report.settings.mem_gib_measured:
        f = report.figures(m, report.settings.latency_threads, FLOOR)
        if f is not None and f.p10_us and f.p90_us and f.p90_us > NOISY_FLOOR_SPREAD * f.p10_us:
            return f.p10_us, f.p90_us
    return None


def fmt_figure(t: Target) -> str:
    """The target's figure with enough digits that it cannot read as the other verdict:
    1.101 against "<= 1.1" shows as 1.101, never as 1.10."""
    if t.figure is None:
        return "-"
    for digits in range(2, 7):
        shown = round(t.figure, digits)
        if (shown <= t.threshold if t.op == "<=" else shown >= t.threshold) == t.met:
            break
    return f"{t.figure:.{digits}f}"


def verdict(t: Target) -> str:
    """The one word every report uses for a target's verdict."""
    return "not measured" if t.met is None else ("met" if t.met else "missed")
