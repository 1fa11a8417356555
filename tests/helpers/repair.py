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

from .child import python_argv

__all__ = ["PREAMBLE", "run"]

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


def run(body: str, timeout: float = 120) -> dict:
    code = PREAMBLE + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RDMASPAWN", "RDMAV_"))}
    r = subprocess.run(python_argv(code), capture_output=True, text=True, timeout=timeout,
                       env=env)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])
