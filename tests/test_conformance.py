"""CPython's own test_subprocess passes with rdmaspawn.patch() in force.

The runner (tests/conformance/run_stdlib_subprocess_tests.py) runs the
test_subprocess of this very interpreter in a fresh process, with every
child started through the engine; the tests it skips, and why, are in
tests/conformance/exclusions.txt. Takes a minute or so; deselect with
``-m "not conformance"``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rdmaspawn

RUNNER = Path(__file__).parent / "conformance" / "run_stdlib_subprocess_tests.py"
TIMEOUT = 900
TAIL = 20000


@pytest.mark.conformance
def test_stdlib_test_subprocess_passes_under_patch():
    """test.test_subprocess of sys.executable passes under patch(), minus exclusions.txt.

    The runner also fails if the patch was not in force after every test, if
    too few children went through the engine, or if an exclusion is stale.
    """
    try:
        found = importlib.util.find_spec("test.test_subprocess") is not None
    except ImportError:
        found = False
    if not found:
        pytest.fail(f"{sys.executable} has no test.test_subprocess: the conformance "
                    "run needs CPython's test package (pyenv builds have it)")
    try:
        proc = subprocess.run(
            [sys.executable, str(RUNNER), "--timeout", str(TIMEOUT - 60)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            timeout=TIMEOUT,
            errors="replace", text=True)
    except subprocess.TimeoutExpired as exc:
        out = exc.output or b""
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        pytest.fail(f"runner timed out after {TIMEOUT}s; output tail:\n{out[-TAIL:]}")
    out = proc.stdout
    expected = f"rdmaspawn {os.path.dirname(rdmaspawn.__file__)}"
    assert expected in out.splitlines(), (
        f"runner imported another rdmaspawn than pytest's ({expected!r}):\n{out[:2000]}")
    returncode = proc.returncode
    assert returncode == 0, f"runner exited {returncode}; output tail:\n{out[-TAIL:]}"
