"""python -m rdmaspawn demo: end to end, in its own child interpreters."""

from __future__ import annotations

import subprocess
import sys

from hazard_helpers import child_env


def test_demo_end_to_end() -> None:
    """The demo plants the hazard in a helper, fork()ed children die of SIGSEGV, rdmaspawn's exits 0, the doctor says HAZARD; exit 0."""
    env = child_env()
    r = subprocess.run([sys.executable, "-m", "rdmaspawn", "demo"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "HAZARD" in out
    assert out.count("killed by SIGSEGV") == 2
    assert "rdmaspawn.Popen(...).wait()            -> exit 0" in out
    assert "Traceback" not in r.stderr


def test_main_without_command_prints_help() -> None:
    """`python -m rdmaspawn` alone prints the commands and exits 2."""
    env = child_env()
    r = subprocess.run([sys.executable, "-m", "rdmaspawn"], capture_output=True, text=True, env=env)
    assert r.returncode == 2
    for cmd in ("doctor", "demo", "bench"):
        assert cmd in r.stdout
