"""Run Python code in a child interpreter and read what it reports.

A child reports by printing one JSON value as its last line of stdout (a
snippet may print other lines before it). :func:`last_json` reads that line
once the child has exited 0, and fails the test with the child's output
otherwise; :func:`run_json` runs a snippet through
:func:`helpers.hazard.run_with_hazard` (``method=None``: nothing planted) and
reads it.
"""
from __future__ import annotations

import json
import subprocess
from typing import Any

from rdmaspawn._host.interpreter import python_command

from . import TESTS
from .hazard import run_with_hazard

__all__ = ["last_json", "python_argv", "run_json"]


def python_argv(code: str, *args: str) -> list[str]:
    """argv for a fresh interpreter that imports this rdmaspawn (wherever its
    cwd is) and the tests' ``helpers``."""
    return python_command(f"import sys; sys.path.insert(0, {TESTS!r})\n" + code, *args)


def last_json(result: subprocess.CompletedProcess[str]) -> Any:
    """The child's last line of stdout as JSON; the test fails unless it exited 0."""
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines, "the child printed nothing\n" + result.stderr
    return json.loads(lines[-1])


def run_json(code: str, method: str | None = None, *, timeout: float = 120,
             env: dict[str, str] | None = None) -> Any:
    """Run ``code`` (dedented) as :func:`run_with_hazard` does, with ``method``
    planted (None: nothing), and return what it printed last, as JSON."""
    return last_json(run_with_hazard(code, method, timeout=timeout, env=env))
