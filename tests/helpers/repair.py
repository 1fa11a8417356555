"""The fork repair's tests share this: Python code run in a fresh interpreter
with the repair's modules at hand, its last line of output read as JSON.

``PREAMBLE`` gives the code ``ctypes``, ``json``, ``os``, ``sys``,
``threading``, ``is_dontfork``, ``forkrepair``, ``plant``, ``outcome(status)``
("ok", "signal N", "exit N") and ``child_work()`` (what a forked worker does);
the code sets ``report``, which is printed.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
from typing import Any

from .child import python_argv

__all__ = ["PREAMBLE", "doctor_on_holder", "run"]

PREAMBLE = """
import ctypes, json, os, sys, threading
from rdmaspawn._host.procfs import is_dontfork
from rdmaspawn._native import forkrepair
from rdmaspawn.testing.hazard import plant

def outcome(status):
    code = os.waitstatus_to_exitcode(status)
    return "ok" if code == 0 else f"signal {-code}" if code < 0 else f"exit {code}"

def child_work():
    # What a forked worker does: allocate, free, import, and answer.
    junk = [bytearray(4096) for _ in range(2000)]
    del junk
    import decimal, fractions  # noqa: F401  (modules not loaded yet)
    return sum(range(1000))
"""


def _environment() -> dict[str, str]:
    """This environment less rdmaspawn's and libibverbs' own variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RDMASPAWN", "RDMAV_"))}


def doctor_on_holder(body: str) -> tuple[Any, dict, int]:
    """Run ``PREAMBLE`` + ``body`` (which prints one JSON line, then reads stdin
    to its end) as a holder process, and ``rdmaspawn doctor --pid`` on it:
    (what the holder printed, the doctor's JSON report, the doctor's exit status)."""
    holder = subprocess.Popen(python_argv(PREAMBLE + body), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=_environment())
    assert holder.stdin is not None and holder.stdout is not None
    try:
        said = json.loads(holder.stdout.readline())
        doctor = ("import sys; from rdmaspawn.tools.doctor.cli import main; "
                  f"sys.exit(main(['--pid', '{holder.pid}', '--json']))")
        r = subprocess.run(python_argv(doctor), capture_output=True, text=True, timeout=120)
        return said, json.loads(r.stdout), r.returncode
    finally:
        holder.stdin.close()
        holder.wait(60)


def run(body: str, timeout: float = 120) -> dict:
    """Run ``PREAMBLE`` + ``body`` (dedented) in a fresh interpreter without
    rdmaspawn's and libibverbs' variables; the ``report`` it set."""
    code = PREAMBLE + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"
    r = subprocess.run(python_argv(code), capture_output=True, text=True, timeout=timeout,
                       env=_environment())
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])
