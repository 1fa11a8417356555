"""The doctor knows UCX's fork settings and what they do to its verdict (issue 28, item 4).

A holder loads Debian's UCX (libucs, libuct), plants the real arena hazard
and runs with UCX's fork variables set or not; the doctor, another process,
reads them from /proc/PID/environ. UCX's purge at fork un-marks its cached
user buffers only: the marks the doctor sees stay a HAZARD whatever UCX's
settings.
"""
from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest

HOLDER = r"""
import ctypes, sys
if sys.argv[1] == "ucx":
    ctypes.CDLL("libucs.so.0", mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL("libuct.so.0", mode=ctypes.RTLD_GLOBAL)
from rdmaspawn.testing.hazard import plant
plant("madvise")
print("ready", flush=True)
sys.stdin.read()
"""

UCX_VARS = ("UCX_IB_FORK_INIT", "UCX_IB_RCACHE_PURGE_ON_FORK", "UCX_RCACHE_PURGE_ON_FORK")

CASES: list[tuple[str, dict[str, str], dict[str, Any], str]] = [
    ("ucx", {}, {"loaded": True, "marks": True, "purge_on_fork": True,
                 "purge_setting": "default", "fork_init": "try (default)"},
     "un-marking them (MADV_DOFORK)"),
    ("ucx", {"UCX_IB_RCACHE_PURGE_ON_FORK": "n"},
     {"loaded": True, "purge_on_fork": False, "purge_setting": "UCX_IB_RCACHE_PURGE_ON_FORK"},
     "keeps its cached user buffers registered and marked"),
    ("ucx", {"UCX_RCACHE_PURGE_ON_FORK": "no"},  # the IB one inherits it
     {"loaded": True, "purge_on_fork": False, "purge_setting": "UCX_RCACHE_PURGE_ON_FORK"},
     "keeps its cached user buffers"),
    ("ucx", {"UCX_IB_FORK_INIT": "no"}, {"loaded": True, "marks": False, "fork_init": "no"},
     "does not call ibv_fork_init()"),
    ("plain", {}, {"loaded": False, "marks": False}, "UCX is not loaded"),
]


@pytest.fixture(scope="module", autouse=True)
def _need_ucx() -> None:
    if ctypes.util.find_library("ucs") is None:
        if os.environ.get("RDMASPAWN_REQUIRE_TOOLS") == "1":  # CI installs libucx0
            pytest.fail("RDMASPAWN_REQUIRE_TOOLS=1 but UCX (libucs) is not installed")
        pytest.skip("UCX (libucs) is not installed (Debian: libucx0)")


@pytest.mark.parametrize("which, env, fields, words", CASES)
def test_ucx_settings_in_pid_and_all(which: str, env: dict[str, str], fields: dict[str, Any],
                                     words: str) -> None:
    """--pid --json and --all --json carry the same `ucx` facts; the verdict stays HAZARD."""
    base = {k: v for k, v in os.environ.items() if k not in UCX_VARS}
    p = subprocess.Popen([sys.executable, "-c", HOLDER, which], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env={**base, **env})
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        one = subprocess.run([sys.executable, "-m", "rdmaspawn", "doctor", "--pid", str(p.pid),
                              "--json"], capture_output=True, text=True, timeout=120)
        text = subprocess.run([sys.executable, "-m", "rdmaspawn", "doctor", "--pid",
                               str(p.pid)], capture_output=True, text=True, timeout=120)
        scan = subprocess.run([sys.executable, "-m", "rdmaspawn", "doctor", "--all", "--json"],
                              capture_output=True, text=True, timeout=120)
    finally:
        p.communicate("", timeout=30)
    report = json.loads(one.stdout)
    assert {k: report["ucx"][k] for k in fields} == fields
    assert words in report["ucx"]["note"]
    assert report["verdict"] == "HAZARD" and one.returncode == 1
    if fields["loaded"]:
        assert any(words in n for n in report["notes"])
        assert f"UCX: {report['ucx']['note']}" in text.stdout
    entry = next(o for o in map(json.loads, scan.stdout.splitlines()) if o.get("pid") == p.pid)
    assert entry["ucx"] == report["ucx"] and entry["verdict"] == "HAZARD"
