"""Run Python code in a child interpreter and read what it reports.

A child reports by printing one JSON value as its last line of stdout (a
snippet may print other lines before it); :func:`helpers.report.last_json`
reads it. :func:`run_json` runs a snippet through
:func:`helpers.hazard.run_with_hazard` (``method=None``: nothing planted) and
reads it.
"""
from __future__ import annotations

from typing import Any

from rdmaspawn._host.interpreter import python_command

from . import TESTS
from .hazard import run_with_hazard
from .report import last_json

__all__ = ["python_argv", "run_json"]


def python_argv(code: str, *args: str) -> list[str]:
    """argv for a fresh interpreter that imports this rdmaspawn (wherever its
    cwd is) and the tests' ``helpers``."""
    return python_command(f"import sys; sys.path.insert(0, {TESTS!r})\n" + code, *args)


def run_json(code: str, method: str | None = None, *, timeout: float = 120,
             env: dict[str, str] | None = None) -> Any:
    """Run ``code`` (dedented) as :func:`run_with_hazard` does, with ``method``
    planted (None: nothing), and return what it printed last, as JSON."""
    return last_json(run_with_hazard(code, method, timeout=timeout, env=env))
