"""python -m rdmaspawn demo: end to end, in its own child interpreters."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The console script pip installed beside this interpreter.
SCRIPT = os.path.join(os.path.dirname(sys.executable), "rdmaspawn")


@pytest.mark.parametrize("cwd", [ROOT, "/"], ids=["repo-root", "slash"])
@pytest.mark.parametrize("how", ["script", "module"])
def test_demo_end_to_end(cwd: str, how: str) -> None:
    """The demo plants the hazard in a helper, fork()ed children die of SIGSEGV, rdmaspawn's
    exits 0, the doctor says HAZARD; exit 0. From the checkout's root (whose src/ must not
    be imported) and from /, as the console script and as ``python -m``."""
    cmd = [SCRIPT] if how == "script" else [sys.executable, "-m", "rdmaspawn"]
    r = subprocess.run(cmd + ["demo"], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "HAZARD" in out
    assert out.count("killed by SIGSEGV") == 2
    assert "rdmaspawn.Popen(...).wait()            -> exit 0" in out
    assert "Traceback" not in r.stderr


def test_main_without_command_prints_help() -> None:
    """`python -m rdmaspawn` alone prints the commands and exits 2."""
    r = subprocess.run([sys.executable, "-m", "rdmaspawn"], capture_output=True, text=True)
    assert r.returncode == 2
    for cmd in ("doctor", "demo", "bench"):
        assert cmd in r.stdout
