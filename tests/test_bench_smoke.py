"""The spawn benchmark runs end to end in its smallest configuration.

This pins down that every spawner produces figures and that the report (table,
JSON, plot) is complete. It asserts nothing about timings: those are the
benchmark's to report, not a test's to judge.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SPAWNERS = ["rdmaspawn", "engine", "subprocess", "subprocess-fork", "posix_spawn", "floor"]
RDMASPAWN = {"rdmaspawn", "engine"}
FIGURES = [
    "median_us",
    "p10_us",
    "p90_us",
    "p25_us",
    "p75_us",
    "throughput_per_s",
    "cpu_per_spawn_us",
    "ratio_to_floor",
    "ratio_to_default",
]
# Far beyond any machine's memory: the benchmark must skip it and say so.
TOO_BIG_GIB = 1 << 20


def bench_command() -> list[str]:
    """The user's command: ``python -m rdmaspawn bench``."""
    return [sys.executable, "-m", "rdmaspawn", "bench"]


def rdmaspawn_importable() -> bool:
    """Whether rdmaspawn (with its built extension) imports, as the benchmark
    would find it: installed, or in place in the checkout."""
    probe = "import rdmaspawn, rdmaspawn._engine; rdmaspawn.Popen; rdmaspawn._engine.spawn"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                       check=False)
    return r.returncode == 0


def has_matplotlib() -> bool:
    r = subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True, check=False)
    return r.returncode == 0


def test_smallest_configuration_reports_every_spawner(tmp_path: Path) -> None:
    """`--mem-gib 0 --threads 1` with a few iterations: each spawner has every
    figure in the JSON, the table and targets are printed, progress goes to
    stderr, an impossible memory size is skipped and reported, and the plot is
    written when matplotlib is there."""
    out = tmp_path / "out"
    json_path = tmp_path / "results.json"
    r = subprocess.run(
        bench_command()
        + [
            "--out", str(out),
            "--json", str(json_path),
            "--mem-gib", f"0,{TOO_BIG_GIB}",
            "--threads", "1",
            "--iterations", "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        
    )
    assert r.returncode == 0, r.stdout + r.stderr

    report = json.loads(json_path.read_text())
    assert report["schema"] == "rdmaspawn-bench/1"
    for key in ("cpu_model", "cores_online", "mem_total_gib", "kernel", "glibc", "python",
                "rdmaspawn_version", "timestamp"):
        assert key in report["machine"], key
    assert [s["id"] for s in report["spawners"]] == SPAWNERS

    settings = report["settings"]
    assert settings["mem_gib_measured"] == [0]
    assert [s["gib"] for s in settings["mem_gib_skipped"]] == [TOO_BIG_GIB]
    assert settings["child_kind"]

    (result,) = report["results"]
    assert (result["mem_gib"], result["threads"]) == (0, 1)

    unavailable = []
    for sid in SPAWNERS:
        fig = result["spawners"][sid]
        if sid in RDMASPAWN and fig["status"] == "unavailable":
            unavailable.append(f"{sid}: {fig['reason']}")
            continue
        assert fig["status"] == "ok", (sid, fig)
        assert fig["samples"] >= 3, (sid, fig)
        for key in FIGURES:
            assert isinstance(fig[key], (int, float)), (sid, key, fig)
        assert 0 < fig["p10_us"] <= fig["median_us"] <= fig["p90_us"], (sid, fig)
        assert fig["throughput_per_s"] > 0, (sid, fig)
        assert fig["cpu_per_spawn_us"] >= 0, (sid, fig)

    names = {t["name"] for t in report["targets"]}
    assert {"thin (floor)", "thin (CPython default)", "parallel"} <= names
    assert "Targets" in r.stdout
    assert "[1/" in r.stderr  # progress

    if has_matplotlib():
        assert (out / "spawn_latency.png").stat().st_size > 0
        assert report["plot"] == str(out / "spawn_latency.png")
    else:
        assert report["plot"] is None
        assert "matplotlib" in r.stderr

    if unavailable:
        # Only acceptable where rdmaspawn itself cannot be imported (extension
        # not built); the other spawners were checked above.
        assert not rdmaspawn_importable(), unavailable
        pytest.skip("rdmaspawn not importable, checked the other spawners only: " + "; ".join(unavailable))
