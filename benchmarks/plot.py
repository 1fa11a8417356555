"""The PNG: latency against resident memory, and throughput against threads."""

from __future__ import annotations

from pathlib import Path

from .model import Report
from .numbers import fmt_gib

NO_MATPLOTLIB = "matplotlib is not installed (pip install 'rdmaspawn[bench]'): no plot"
DPI = 110


def plot(report: Report, path: Path) -> str | None:
    """Write the plot of a report that measured something to `path`; None, else why not."""
    # matplotlib is optional (the "bench" extra): mypy may run where it is missing.
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return NO_MATPLOTLIB
    mems = report.settings.mem_gib_measured
    threads = report.settings.threads
    lat_threads = report.settings.latency_threads
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for s in report.spawners:
        pts = [(m, f) for m in mems if (f := report.figures(m, lat_threads, s.id)) is not None]
        if pts:
            med = [f.median_us or 0.0 for _, f in pts]
            below = [(f.median_us or 0.0) - (f.p10_us or 0.0) for _, f in pts]
            above = [(f.p90_us or 0.0) - (f.median_us or 0.0) for _, f in pts]
            ax1.errorbar([m for m, _ in pts], med, yerr=[below, above], marker="o", capsize=3,
                         label=s.id)
        tps = [(t, f) for t in threads if (f := report.figures(min(mems), t, s.id)) is not None]
        if tps:
            ax2.plot([t for t, _ in tps], [f.throughput_per_s for _, f in tps], marker="o",
                     label=s.id)
    ax1.set(xlabel="parent resident memory (GiB)", yscale="log",
            ylabel="spawn + wait latency, median (us); bars p10..p90",
            title=f"Latency vs resident memory ({lat_threads} thread)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize="small")
    ax2.set(xlabel="threads spawning at once", ylabel="spawns per second",
            title=f"Throughput at {fmt_gib(min(mems))} resident", xticks=threads)
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize="small")
    m = report.machine
    fig.suptitle(f"rdmaspawn {m.rdmaspawn_version} - {m.python} - {m.cpu_model} - "
                 f"{m.cores_usable} cores", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return None
