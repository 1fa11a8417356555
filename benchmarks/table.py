"""The plain-text report a run prints on stdout."""

from __future__ import annotations

from .analysis import fmt_figure, growth_ms, noisy_floor, throughput_cells, verdict
from .model import Report
from .numbers import fmt_gib, fmt_ratio, fmt_us


def _latency(report: Report, w: int) -> list[str]:
    lat_threads = report.settings.latency_threads
    lines = [
        f"Latency of spawn + wait, {lat_threads} thread; CPU = parent's CPU per spawn;",
        "x floor / x default = median over the C floor's / over subprocess.Popen's default path.",
        "The floor runs in its own small process: the resident memory is this Python",
        "process's, so the floor stays the floor (constant) at every size.",
    ]
    capped = False
    for mem in report.settings.mem_gib_measured:
        lines += ["", f"resident {fmt_gib(mem)}",
                  f"  {'spawner':<{w}}  {'median':>9}  {'p10':>9}  {'p90':>9}  {'CPU':>9}  "
                  f"{'x floor':>8}  {'x default':>9}  {'n':>5}"]
        row = next((r for r in report.results
                    if r.mem_gib == mem and r.threads == lat_threads), None)
        for s in report.spawners:
            f = row.spawners.get(s.id) if row else None
            if f is None or not f.measured:
                why = (f"{f.status}: {f.reason or f.error or 'no samples'}" if f
                       else "-: not measured")
                lines.append(f"  {s.id:<{w}}  {why}")
                continue
            capped = capped or f.capped
            lines.append(
                f"  {s.id:<{w}}  {fmt_us(f.median_us):>9}  {fmt_us(f.p10_us):>9}  "
                f"{fmt_us(f.p90_us):>9}  {fmt_us(f.cpu_per_spawn_us):>9}  "
                f"{fmt_ratio(f.ratio_to_floor):>8}  {fmt_ratio(f.ratio_to_default):>9}  "
                f"{f.samples:>5}{'*' if f.capped else ' '}"
            )
    if capped:
        lines.append("  (* stopped by the time cap with fewer samples)")
    return lines


def _throughput(report: Report, w: int) -> list[str]:
    threads = report.settings.threads
    lines = ["", "Throughput, spawns/s with N threads spawning at once (xN = over 1 thread)"]
    for mem in report.settings.mem_gib_measured:
        lines.append(f"resident {fmt_gib(mem)}")
        lines.append(f"  {'spawner':<{w}}" + "".join(f"  {str(t) + ' thr':>12}" for t in threads))
        for s in report.spawners:
            cells = throughput_cells(report, mem, s.id, " x{:.2f}")
            lines.append(f"  {s.id:<{w}}" + "".join(f"  {c:>12}" for c in cells))
    return lines


def render_table(report: Report) -> str:
    m = report.machine
    w = max(len(s.id) for s in report.spawners)
    lines = [
        f"rdmaspawn spawn benchmark - {m.python}, {m.cpu_model}, {m.cores_usable} cores, "
        f"{m.mem_total_gib} GiB, kernel {m.kernel_release}",
        f"child: {report.settings.child} ({report.settings.child_kind})",
        "",
    ]
    lines += _latency(report, w)

    if growth := growth_ms(report):
        lines += ["", "Growth of the median with resident memory (least squares):"]
        lines += [f"  {sid:<{w}}  {v:+8.2f} ms per GiB" for sid, v in growth.items()]

    if report.settings.threads != [1]:
        lines += _throughput(report, w)

    if report.settings.mem_gib_skipped:
        lines.append("")
        lines += [f"skipped {fmt_gib(sk.gib)}: {sk.reason}"
                  for sk in report.settings.mem_gib_skipped]

    lines += ["", "Targets (figures, not assertions):"]
    nw = max((len(t.name) for t in report.targets), default=0)
    for t in report.targets:
        want = f"(want {t.op} {t.threshold:g})"
        lines.append(f"  {t.name:<{nw}}  {fmt_figure(t):>6} {want:<14}  "
                     f"{verdict(t).upper():<12}  {t.note}")

    spread = noisy_floor(report)
    if spread and not report.settings.pin:
        lines += [
            "",
            f"Note: the C floor itself is spread wide (p10 {fmt_us(spread[0])}, "
            f"p90 {fmt_us(spread[1])}):",
            "the machine adds latency to the spawns, often the wake-up of an idle CPU on a VM.",
            "Medians and ratios are then noisy; --pin runs the child on the parent's CPU.",
        ]
    return "\n".join(lines)
