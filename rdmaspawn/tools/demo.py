"""``rdmaspawn demo``: watch a fork()ed child die where rdmaspawn's child lives.

A child interpreter plants the real hazard (:func:`rdmaspawn.testing.hazard.plant`),
the demo asks the doctor about it from outside, and the child then starts
``true`` by ``os.fork()`` + exec, by ``subprocess`` with a ``preexec_fn`` and by
``rdmaspawn.Popen``: the calling process never plants anything, so it cannot
crash. Exit status 0 when the fork()ed children died of a signal and
rdmaspawn's exited 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from .._host.interpreter import python_command

__all__ = ["main", "run_demo"]

_TRUE = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"

# Runs in the child interpreter; one JSON object per line on stdout.
_CHILD = r"""
import json, os, signal, subprocess, sys

def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()

def describe(rc):
    return ("killed by " + signal.Signals(-rc).name) if rc < 0 else "exit %d" % rc

TRUE = sys.argv[1]
from rdmaspawn.testing.hazard import plant
h = plant("auto")
say(step="planted", method=h.method, library=h.library, fallback=h.fallback,
    start=h.start, length=h.length, arena=h.arena, pid=os.getpid())
sys.stdin.readline()  # the parent runs the doctor on us meanwhile

pid = os.fork()
if pid == 0:
    try:
        os.execv(TRUE, [TRUE])
    finally:
        os._exit(127)
say(step="os.fork", result=describe(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])))
say(step="preexec_fn", result=describe(subprocess.run([TRUE], preexec_fn=lambda: None).returncode))

import rdmaspawn
try:
    say(step="rdmaspawn", result=describe(rdmaspawn.Popen([TRUE]).wait()))
except Exception as e:
    say(step="rdmaspawn", result="error: %s: %s" % (type(e).__name__, e))
"""


def run_demo(out: Any = None, timeout: float = 60.0) -> int:
    """Run the demonstration, writing to ``out`` (stdout); return the exit status."""
    w = (out or sys.stdout).write
    env = {k: v for k, v in os.environ.items() if k not in ("RDMAV_FORK_SAFE", "IBV_FORK_SAFE")}
    w("rdmaspawn demo: a process that holds MADV_DONTFORK memory starts `true` three ways.\n\n")
    # Started with the standard subprocess from a clean process: safe.
    child = subprocess.Popen(
        python_command(_CHILD, _TRUE), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env, text=True,
    )
    results: dict[str, str] = {}
    try:
        line = child.stdout.readline() if child.stdout else ""
        if not line:
            _, err = child.communicate(timeout=timeout)
            w("The helper process could not plant the hazard:\n%s\n" % (err.strip() or "no output"))
            return 1
        planted = json.loads(line)
        w(_planted_text(planted))
        w(f"2. rdmaspawn doctor --pid {planted['pid']}: {_doctor_line(planted['pid'])}\n")
        out_text, err = child.communicate("go\n", timeout=timeout)
        for raw in out_text.splitlines():
            try:
                d = json.loads(raw)
            except ValueError:
                continue
            results[d.get("step", "?")] = d.get("result", "did not run")
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        w(f"The helper process did not finish within {timeout:g} s.\n")
        return 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    labels = {"os.fork": "os.fork() + exec", "preexec_fn": "subprocess.run(..., preexec_fn=...)",
              "rdmaspawn": "rdmaspawn.Popen(...).wait()"}
    for i, (key, label) in enumerate(labels.items(), 3):
        w(f"{i}. {label:<38} -> {results.get(key, 'did not run')}\n")
    if child.returncode != 0:
        w(f"\nThe helper process itself ended with status {child.returncode}:\n{err.strip()}\n")
        return 1
    if (all(results.get(k, "").startswith("killed by") for k in ("os.fork", "preexec_fn"))
            and results.get("rdmaspawn") == "exit 0"):
        w("\nAs expected: the fork()ed children died before exec; rdmaspawn's child, which\n"
          "shares the parent's memory (CLONE_VM|CLONE_VFORK), ran `true` and exited 0.\n")
        return 0
    w("\nNot as expected (see above): fork()ed children should die, rdmaspawn's should exit 0.\n")
    return 1


def _planted_text(planted: dict[str, Any]) -> str:
    """Step 1 in words: where the hazard is and which way it was planted."""
    where = (f"1. Planted in helper process {planted['pid']}: "
             f"0x{planted['start']:x}-0x{planted['start'] + planted['length']:x} "
             f"({planted['length']} bytes), over the malloc arena at 0x{planted['arena']:x},\n")
    if planted["method"] == "verbs":
        return where + (f"   through libibverbs ({planted['library']}): ibv_fork_init(), then "
                        "ibv_dontfork_range() as ibv_reg_mr() does.\n")
    how = where + "   with madvise(MADV_DONTFORK) directly, not through libibverbs:\n"
    how += f"   {planted['fallback']}.\n"
    if planted["fallback"] and planted["fallback"].startswith("cannot load"):
        how += "   Install it to watch the real ibv_dontfork_range() mark the same pages.\n"
    return how


def _doctor_line(pid: int) -> str:
    from .doctor import doctor

    try:
        report = doctor(pid)
    except OSError as e:
        return f"could not inspect ({e})"
    if report.ok:
        return "OK"
    # A HAZARD verdict has a finding a fork() trips on.
    worst = next((f for f in report.findings if f.risk == "high"), report.findings[0])
    return f"{report.verdict} -- {worst.kind} at 0x{worst.mapping.start:x} ({worst.risk})"


def main(argv: Sequence[str] | None = None, prog: str = "rdmaspawn demo") -> int:
    """``rdmaspawn demo``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Show a fork()ed child dying of SIGSEGV in a process with MADV_DONTFORK "
                    "memory, and rdmaspawn's child succeeding in the same process.",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    return run_demo(timeout=parser.parse_args(argv).timeout)
