"""The spawn benchmark end to end in its smallest configurations.

These pin down that every spawner produces figures, where a run writes its
files (an explicit --out; else a named folder it prints; never ``/``), and
that the generated block of docs/benchmark.md is rendered from the JSON and
nothing else on that page changes. They assert nothing about timings: those are the benchmark's to
report, not a test's to judge.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rdmaspawn.bench.analysis import MIN_ROUNDS_FOR_SPREAD, fmt_figure, round_ratio_spread
from rdmaspawn.bench.model import SCHEMA, Target
from rdmaspawn.bench.numbers import fmt_us
from rdmaspawn.bench.outdir import DEFAULT_PREFIX, default_out_dir
from rdmaspawn.bench.readme import BEGIN, END, MICRO

SPAWNERS = ["rdmaspawn", "engine", "subprocess", "subprocess-patched", "subprocess-fork",
            "posix_spawn", "floor"]
FIGURES = [
    "median_us", "p10_us", "p90_us", "p25_us", "p75_us", "throughput_per_s",
    "cpu_per_spawn_us", "ratio_to_floor", "ratio_to_default",
]
# The comparisons issue 9 asks for, by target name.
HOT_PATH_TARGETS = [
    "latency vs subprocess",
    "throughput vs subprocess (2 threads)",
    "throughput vs subprocess (4 threads)",
    "CPU per spawn <= CPython's",
    "CPU per spawn <= CPython's, patch()",
]
# Far beyond any machine's memory: the benchmark must skip it and say so.
TOO_BIG_GIB = 1 << 20
# The cheapest measuring run: one size, one thread, a few spawns, no plot.
TINY = ["--mem-gib", "0", "--threads", "1", "--iterations", "3", "--no-plot"]
DEFAULT_FOLDER = re.compile(re.escape(DEFAULT_PREFIX) + r"\d{8}-\d{6}$")
# The page that holds the generated block, beside the record it is rendered from.
BENCH_PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmark.md"


def bench(*args: str, cwd: Path | str | None = None,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The user's command: ``python -m rdmaspawn bench ARGS``."""
    return subprocess.run([sys.executable, "-m", "rdmaspawn", "bench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def has_matplotlib() -> bool:
    r = subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True,
                       check=False)
    return r.returncode == 0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One small run with 1 and 2 threads and an impossible size: (result, out folder)."""
    out = tmp_path_factory.mktemp("bench") / "out"
    r = bench("--out", str(out), "--mem-gib", f"0,{TOO_BIG_GIB}", "--threads", "1,2",
              "--iterations", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    return r, out


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_every_spawner_has_figures(run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """Each spawner has every figure in every configuration, the machine is described,
    an impossible size is skipped and reported, the table and targets are printed,
    progress goes to stderr, and the plot is written when matplotlib is there."""
    r, out = run
    report = load(out / "spawn_latency.json")
    assert report["schema"] == SCHEMA
    for key in ("cpu_model", "cores_online", "mem_total_gib", "kernel", "glibc", "python",
                "rdmaspawn_version", "timestamp"):
        assert report["machine"][key], key
    assert [s["id"] for s in report["spawners"]] == SPAWNERS
    settings = report["settings"]
    assert settings["mem_gib_measured"] == [0]
    assert [s["gib"] for s in settings["mem_gib_skipped"]] == [TOO_BIG_GIB]
    assert settings["child_kind"]

    assert [(c["mem_gib"], c["threads"]) for c in report["results"]] == [(0, 1), (0, 2)]
    for config in report["results"]:
        for sid in SPAWNERS:
            fig = config["spawners"][sid]
            assert fig["status"] == "ok", (sid, fig)
            assert fig["samples"] >= 3, (sid, fig)
            for key in FIGURES:
                assert isinstance(fig[key], (int, float)), (sid, key, fig)
            assert 0 < fig["p10_us"] <= fig["median_us"] <= fig["p90_us"], (sid, fig)
            assert fig["throughput_per_s"] > 0, (sid, fig)
            assert fig["cpu_per_spawn_us"] >= 0, (sid, fig)
            assert len(fig["batch_cpu_per_spawn_us"]) == fig["batches"], (sid, fig)

    targets = {t["name"]: t for t in report["targets"]}
    assert set(HOT_PATH_TARGETS) <= set(targets)
    # Measured at 1 and 2 threads: the 4-thread comparison says it was not measured.
    assert isinstance(targets["throughput vs subprocess (2 threads)"]["figure"], float)
    assert isinstance(targets["CPU per spawn <= CPython's"]["figure"], float)
    assert isinstance(targets["CPU per spawn <= CPython's, patch()"]["figure"], float)
    assert targets["throughput vs subprocess (4 threads)"]["met"] is None
    assert "not measured" in targets["throughput vs subprocess (4 threads)"]["note"]
    assert "Targets" in r.stdout and "latency vs subprocess" in r.stdout
    assert "[1/4]" in r.stderr  # progress: 2 sizes x 2 thread counts

    if has_matplotlib():
        assert (out / "spawn_latency.png").stat().st_size > 0
        assert report["plot"] == str(out / "spawn_latency.png")
    else:
        assert report["plot"] is None
        assert "matplotlib" in r.stderr


def test_explicit_out_holds_the_files_and_is_printed(
    run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """--out is used as given (created), and the run says where it wrote."""
    r, out = run
    assert (out / "spawn_latency.json").is_file()
    assert f"output folder: {out}" in r.stderr
    assert f"files in {out}" in r.stderr


def _new_folder(parent: Path, before: set[str]) -> Path:
    new = sorted(set(os.listdir(parent)) - before)
    assert len(new) == 1 and DEFAULT_FOLDER.match(new[0]), new
    return parent / new[0]


def test_default_out_is_a_named_folder_in_the_cwd(tmp_path: Path) -> None:
    """Without --out a run makes ./rdmaspawn-bench-YYYYMMDD-HHMMSS, writes there and prints it."""
    r = bench(*TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    folder = _new_folder(tmp_path, set())
    assert (folder / "spawn_latency.json").is_file()
    assert f"output folder: {folder}" in r.stderr


def test_run_from_root_writes_under_tmpdir_not_root(tmp_path: Path) -> None:
    """From / (even as root, who could write there) the default folder goes under
    $TMPDIR, the run prints it, and / gains nothing."""
    before_root = set(os.listdir("/"))
    r = bench(*TINY, cwd="/", env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(os.listdir("/")) == before_root
    folder = _new_folder(tmp_path, set())
    assert (folder / "spawn_latency.json").is_file()
    assert f"output folder: {folder}" in r.stderr


def test_out_root_is_refused() -> None:
    """--out / is refused before anything is measured or written."""
    before_root = set(os.listdir("/"))
    r = bench("--out", "/", *TINY)
    assert r.returncode == 2
    assert "refusing to write" in r.stderr and "[1/" not in r.stderr
    assert set(os.listdir("/")) == before_root


def test_default_out_dir_choice(tmp_path: Path) -> None:
    """The chooser: the cwd when it is a writable folder; the temp dir for /, or no cwd."""
    import datetime

    now = datetime.datetime(2026, 11, 30, 9, 8, 7)
    name = f"{DEFAULT_PREFIX}20261130-090807"
    tmp = tmp_path / "tmp"
    assert default_out_dir(tmp_path, tmp, now) == tmp_path / name
    assert default_out_dir(Path("/"), tmp, now) == tmp / name
    assert default_out_dir(None, tmp, now) == tmp / name
    assert default_out_dir(tmp_path / "missing", tmp, now) == tmp / name


def _split(text: str) -> tuple[str, str, str]:
    """(through BEGIN, between the markers, from END)."""
    i = text.index(BEGIN) + len(BEGIN)
    j = text.index(END)
    return text[:i], text[i:j], text[j:]


def _readme_copy(tmp_path: Path) -> Path:
    readme = tmp_path / "benchmark.md"
    readme.write_text(BENCH_PAGE.read_text())
    assert BEGIN in readme.read_text() and END in readme.read_text()
    return readme


def test_readme_block_round_trip(run: tuple[subprocess.CompletedProcess[str], Path],
                                 tmp_path: Path) -> None:
    """--from-json --readme rewrites only the block between the markers, and the block
    carries the JSON's figures and verdicts; rendering twice changes nothing."""
    _, out = run
    record = out / "spawn_latency.json"
    report = load(record)
    readme = _readme_copy(tmp_path)
    head, _, tail = _split(readme.read_text())
    record_bytes = record.read_bytes()

    r = bench("--from-json", str(record), "--readme", str(readme))
    assert r.returncode == 0, r.stdout + r.stderr
    text = readme.read_text()
    new_head, block, new_tail = _split(text)
    assert (new_head, new_tail) == (head, tail)
    assert record.read_bytes() == record_bytes  # re-rendering does not rewrite the record

    assert report["machine"]["python"] in block
    assert report["machine"]["timestamp"][:16].replace("T", " ") in block
    at_1 = report["results"][0]["spawners"]
    for s in report["spawners"]:
        f = at_1[s["id"]]
        cell = f"{fmt_us(f['median_us'], MICRO)} [{fmt_us(f['p10_us'], MICRO)} .. "
        assert cell in block, (s["id"], cell)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in block.splitlines()
            if line.startswith("| ")}
    for t in report["targets"]:
        want = {True: "**met**", False: "**missed**", None: "**not measured**"}[t["met"]]
        assert want in rows[t["name"]], rows[t["name"]]

    bench("--from-json", str(record), "--readme", str(readme))
    assert readme.read_text() == text


def test_a_missed_target_is_never_called_met(run: tuple[subprocess.CompletedProcess[str], Path],
                                             tmp_path: Path) -> None:
    """The block prints the JSON's verdict: a figure the record marks missed, even one
    within a hair of its threshold, reads "missed" with digits that show it."""
    _, out = run
    report = load(out / "spawn_latency.json")
    t = next(t for t in report["targets"] if t["name"] == "latency vs subprocess")
    t.update(figure=t["threshold"] + 0.0004, met=False)
    record = tmp_path / "edited.json"
    record.write_text(json.dumps(report))
    readme = _readme_copy(tmp_path)
    assert bench("--from-json", str(record), "--readme", str(readme)).returncode == 0
    (row,) = [line for line in readme.read_text().splitlines()
              if line.startswith("| latency vs subprocess |")]
    assert "**missed**" in row and "met" not in row.replace("missed", "")
    assert f"| {t['threshold'] + 0.0004:.4f} |" in row


def test_figure_digits_never_contradict_the_verdict() -> None:
    """1.101 against <= 1.1 shows as 1.101 (missed), 1.0999 as 1.10 (met)."""
    def target(fig: float, op: str, met: bool) -> Target:
        return Target("t", "", fig, op, 1.1, met, "")

    assert fmt_figure(target(1.101, "<=", False)) == "1.101"
    assert fmt_figure(target(1.0999, "<=", True)) == "1.10"
    assert fmt_figure(target(1.0996, ">=", False)) == "1.0996"
    assert fmt_figure(Target("t", "", None, "<=", 1.1, None, "")) == "-"


def test_round_by_round_spread() -> None:
    """The spread of a side-by-side ratio pairs the two spawners' batches round by
    round, and is left out when there are too few rounds to say anything."""
    assert round_ratio_spread([1.0, 2.0, 3.0, 4.0, 9.0], [1.0, 1.0, 1.0, 1.0]) == [1.75, 3.25]
    assert round_ratio_spread([2.0] * 5, [1.0, 2.0, 4.0, 4.0, 4.0]) == [0.5, 1.0]
    assert round_ratio_spread([1.0] * (MIN_ROUNDS_FOR_SPREAD - 1), [1.0] * 9) is None


def test_readme_without_markers_is_refused_untouched(tmp_path: Path) -> None:
    """--readme on a file without the markers fails at once (before any measuring)
    and leaves the file as it was."""
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\nno markers here\n")
    r = bench("--readme", str(readme), *TINY, cwd=tmp_path)
    assert r.returncode == 2 and "bench:begin" in r.stderr
    assert readme.read_text() == "# title\n\nno markers here\n"
    assert os.listdir(tmp_path) == ["README.md"]  # no output folder either


@pytest.mark.parametrize("schema", ["rdmaspawn-bench/1", "rdmaspawn-bench/2",
                                    "rdmaspawn-bench/3"])
def test_an_older_record_is_rendered_with_this_versions_targets(
    run: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path, schema: str,
) -> None:
    """An older record (without the hot-path targets, or the CPU one, and without
    batch CPU figures) is read, its targets recomputed from its figures, and
    written back in this version's schema with --json."""
    _, out = run
    report = load(out / "spawn_latency.json")
    report["schema"] = schema
    report["targets"] = [t for t in report["targets"] if t["name"] not in HOT_PATH_TARGETS]
    for config in report["results"]:
        for fig in config["spawners"].values():
            del fig["batch_cpu_per_spawn_us"]
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(report))
    r = bench("--from-json", str(old), "--json", str(new))
    assert r.returncode == 0, r.stdout + r.stderr
    upgraded = load(new)
    assert upgraded["schema"] == SCHEMA
    assert set(HOT_PATH_TARGETS) <= {t["name"] for t in upgraded["targets"]}
    cpu = next(t for t in upgraded["targets"] if t["name"] == "CPU per spawn <= CPython's")
    assert isinstance(cpu["figure"], float) and cpu["round_ratio_p25_p75"] is None
    for config in upgraded["results"]:
        for fig in config["spawners"].values():
            assert fig.pop("batch_cpu_per_spawn_us") == []
    assert upgraded["results"] == report["results"]


@pytest.mark.parametrize("spawner_grows, floor_grows, figure, met", [
    (1.2, 1.2, 1.0, True),  # the machine slowed down between the sizes: no growth
    (1.2, 1.0, 1.2, False),  # rdmaspawn.Popen alone grew with the resident memory
    (1.0, 0.8, 1.25, False),  # the machine sped up and hid it: growth after all
])
def test_flat_is_measured_against_the_floor_beside_it(
    run: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path,
    spawner_grows: float, floor_grows: float, figure: float, met: bool,
) -> None:
    """The "flat" target compares two sizes measured minutes apart: the real run's
    0 GiB configurations, copied as a second size with rdmaspawn.Popen's and the
    floor's medians scaled, read back as a record to recompute. The figure is
    rdmaspawn.Popen over the floor beside it, at one size over the other."""
    _, out = run
    report = load(out / "spawn_latency.json")
    report["schema"] = "rdmaspawn-bench/3"  # recompute the targets
    big = 16.0
    for config in [c for c in report["results"] if c["mem_gib"] == 0]:
        copy = json.loads(json.dumps(config))
        copy["mem_gib"] = big
        copy["spawners"]["rdmaspawn"]["median_us"] *= spawner_grows
        copy["spawners"]["floor"]["median_us"] *= floor_grows
        report["results"].append(copy)
    report["settings"]["mem_gib_measured"] = [0, big]
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(report))
    r = bench("--from-json", str(old), "--json", str(new))
    assert r.returncode == 0, r.stdout + r.stderr
    flat = next(t for t in load(new)["targets"] if t["name"] == "flat (rdmaspawn.Popen)")
    assert flat["figure"] == pytest.approx(figure) and flat["met"] is met, flat
    assert f"plain medians' ratio {spawner_grows:.2f}" in flat["note"], flat
    assert f"the floor's own {floor_grows:.2f}" in flat["note"], flat


def test_the_docs_block_is_the_rendering_of_the_docs_record(tmp_path: Path) -> None:
    """docs/benchmark.md's block is exactly what docs/spawn_latency.json renders to:
    a hand edit of the block, or a record replaced without re-rendering, fails here."""
    record = BENCH_PAGE.parent / "spawn_latency.json"
    page = tmp_path / BENCH_PAGE.name
    page.write_text(BENCH_PAGE.read_text())
    r = bench("--from-json", str(record), "--readme", str(page))
    assert r.returncode == 0, r.stdout + r.stderr
    # The copy lies outside docs/, so it names the record by its full path; the page,
    # beside the record, by its name.
    rendered = _split(page.read_text())[1]
    assert rendered.replace(str(record), record.name).replace(
        str(record.with_name("spawn_latency.png")), "spawn_latency.png"
    ) == _split(BENCH_PAGE.read_text())[1]
