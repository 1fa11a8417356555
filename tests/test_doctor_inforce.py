"""The doctor tells a process rdmaspawn protects from one it does not (issue 28, item 4).

Each holder plants the real arena hazard, then turns rdmaspawn's protection
on (or not) the way a program does; the doctor runs as another process, so
all it has is what /proc shows: the markers patch(), guard() and the fork
repair map (rdmaspawn/_startup/markers.py). Before them, ``--all`` listed
every such process as HAZARD.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

HOLDER = r"""
import sys
import rdmaspawn
from rdmaspawn.testing.hazard import plant
plant("madvise")
state = sys.argv[1]
if state in ("patch", "patch-unpatch"):
    rdmaspawn.patch()
if state == "patch-unpatch":
    rdmaspawn.unpatch()
if state in ("guard-raise", "guard-warn"):
    rdmaspawn.guard(state[6:])
if state == "guard-raise-unguard":
    rdmaspawn.guard("raise")
    rdmaspawn.unguard()
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def holders(*states: tuple[str, dict[str, str] | None]) -> Iterator[list[int]]:
    """One holder process per (state, env), all ready at once."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for state, env in states:
            procs.append(subprocess.Popen([sys.executable, "-c", HOLDER, state],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          text=True, env=env))
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.communicate("", timeout=30)


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rdmaspawn", "doctor", *args],
                          capture_output=True, text=True, timeout=120)


CASES: list[tuple[str, dict[str, str] | None, str, list[str], dict[str, Any]]] = [
    ("none", None, "HAZARD", [], {"patched": False, "guarded": None}),
    ("patch", None, "PROTECTED", ["patch"], {"patched": True, "guarded": None}),
    ("guard-raise", None, "PROTECTED", ["guard"], {"patched": False, "guarded": "raise"}),
    # warn lets the fork happen: named, but no protection
    ("guard-warn", None, "HAZARD", [], {"patched": False, "guarded": "warn"}),
    ("patch-unpatch", None, "HAZARD", [], {"patched": False, "guarded": None}),
    ("guard-raise-unguard", None, "HAZARD", [], {"patched": False, "guarded": None}),
    ("none", {"RDMASPAWN": "on"}, "PROTECTED", ["patch", "guard"],
     {"patched": True, "guarded": "raise"}),
]


def _env(extra: dict[str, str] | None) -> dict[str, str] | None:
    return None if extra is None else {**os.environ, **extra}


@pytest.fixture(scope="module")
def scans() -> Iterator[tuple[list[int], str, str, list[int]]]:
    """Every case's holder at once, alive through the module's tests, and one
    --all scan in text and one in JSON lines over them all: a scan reads every
    process on the machine (two per case took 10-16 s each of a loaded CI)."""
    with holders(*((state, _env(env)) for state, env, *_ in CASES)) as pids:
        text, lines = doctor("--all"), doctor("--all", "--json")
        yield pids, text.stdout, lines.stdout, [text.returncode, lines.returncode]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[
    f"{c[0]}-{'on' if c[1] else 'plain'}" for c in CASES])
def test_all_and_pid_say_who_is_protected(case: int, scans: tuple[list[int], str, str, list[int]]
                                          ) -> None:
    """--all (text and JSON lines) and --pid (text and JSON) on the same process."""
    state, env, verdict, by, fields = CASES[case]
    protection = "protected" if by else "not protected"
    pids, text, lines, all_rcs = scans
    pid = pids[case]
    line = next(x for x in text.splitlines() if x.startswith(f"pid {pid:<7} "))
    assert line.split()[2] == verdict
    entry = next(o for o in map(json.loads, lines.splitlines()) if o.get("pid") == pid)
    assert entry["verdict"] == verdict and entry["hazardous"] is True
    assert entry["rdmaspawn"]["protection"] == protection
    assert entry["rdmaspawn"]["protected_by"] == by
    assert {k: entry["rdmaspawn"][k] for k in fields} == fields
    one, one_text = doctor("--pid", str(pid), "--json"), doctor("--pid", str(pid))
    report = json.loads(one.stdout)
    assert report["verdict"] == "HAZARD"  # the memory: protection never hides it
    assert report["rdmaspawn"]["protection"] == protection
    assert report["rdmaspawn"]["protected_by"] == by
    assert {k: report[k] for k in fields} == fields
    said = next(x for x in one_text.stdout.splitlines() if x.startswith("  rdmaspawn: "))
    assert said.startswith("  rdmaspawn: " + ("protected by" if by else "not protected"))
    # Any unprotected hazard among the holders makes each scan exit 1.
    assert all_rcs == [1, 1]


def test_protected_alone_exits_0() -> None:
    """A scan whose only hazardous process is protected exits 0 and counts it as
    protected; the same process unprotected exits 1."""
    from rdmaspawn.tools.doctor import scan_node

    with holders(("patch", None), ("none", None)) as (patched, bare):
        protected, unprotected = scan_node([patched]), scan_node([bare])
    assert protected.summary()["hazardous"] == 0 and protected.summary()["protected"] == 1
    assert protected.exit_code == 0
    assert unprotected.summary()["hazardous"] == 1 and unprotected.exit_code == 1
