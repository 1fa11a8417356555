"""Read what a child interpreter reports: one JSON value as its last line of stdout.

Kept free of any rdmaspawn import, so that a test which runs without the
package installed (tests/test_wheel.py, driven by an interpreter that only
gets the wheel in a venv of its own) can use it.
"""
from __future__ import annotations

import json
import subprocess
from typing import Any

__all__ = ["last_json"]


def last_json(result: subprocess.CompletedProcess[str]) -> Any:
    """The child's last line of stdout as JSON; the test fails unless it exited 0."""
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines, "the child printed nothing\n" + result.stderr
    return json.loads(lines[-1])
