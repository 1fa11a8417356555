"""``rdmaspawn demo``: watch a fork()ed child die where rdmaspawn's child lives.

Everything dangerous happens in a child interpreter of the demo's own: it
plants the real hazard (:func:`rdmaspawn.testing.hazard.plant`: libibverbs'
``ibv_dontfork_range()`` when it can, else ``madvise(MADV_DONTFORK)``, over a
malloc arena), and the demo, from outside, asks the doctor about that
process.  Then the child starts ``true`` three ways -- ``os.fork()`` + exec,
``subprocess`` with a ``preexec_fn`` (which forks), and ``rdmaspawn.Popen`` --
and reports how each ended.  The calling process never plants anything, so it
cannot crash.

Exit status 0 when the demonstration went as expected: the fork()-based
children died of a signal and rdmaspawn's exited 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, Optional, Sequence

from .._interpreter import python_command

__all__ = ["main", "run_demo"]

_TRUE = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"

# Runs in the child interpreter; one JSON object per line on stdout.
_CHILD = r"""
import json, os, signal, subprocess, sys

def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()

def describe(status):
    if os.WIFSIGNALED(status):
        return "killed by " + signal.Signals(os.WTERMSIG(status)).name
    return "exit %d" % os.WEXITSTATUS(status)

TRUE = sys.argv[1]
from rdmaspawn.testing.hazard import plant
h = plant("auto")
say(step="planted", method=h.method, library=h.library, start=h.start,
    length=h.length, arena=h.arena, pid=os.getpid())
sys.stdin.readline()  # the parent runs the doctor on us meanwhile

pid = os.fork()
if pid == 0:
    try:
        os.execv(TRUE, [TRUE])
    finally:
        os._exit(127)
say(step="os.fork", result=describe(os.waitpid(pid, 0)[1]))

rc = subprocess.run([TRUE], preexec_fn=lambda: None).returncode
say(step="preexec_fn", result=("killed by " + signal.Signals(-rc).name) if rc < 0 else "exit %d" % rc)

import rdmaspawn
try:
    rc = rdmaspawn.Popen([TRUE]).wait()
    say(step="rdmaspawn", result=("killed by " + signal.Signals(-rc).name) if rc < 0 else "exit %d" % rc)
except Exception as e:
    say(step="rdmaspawn", result="error: %s: %s" % (type(e).__name__, e))
"""


def run_demo(out: Any = None, timeout: float = 60.0) -> int:
    """Run the demonstration, writing to ``out`` (stdout); return the exit status."""
    from .doctor import doctor

    w = (out or sys.stdout).write
    env = dict(os.environ)
    env.pop("RDMAV_FORK_SAFE", None)
    env.pop("IBV_FORK_SAFE", None)
    w("rdmaspawn demo: a process that holds MADV_DONTFORK memory starts `true` three ways.\n\n")
    # Started with the standard subprocess from a clean process: safe.
    child = subprocess.Popen(
        python_command(_CHILD, _TRUE), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env, text=True,
    )
    steps: Dict[str, Dict[str, Any]] = {}
    try:
        line = child.stdout.readline() if child.stdout else ""
        if not line:
            _, err = child.communicate(timeout=timeout)
            w("The helper process could not plant the hazard:\n%s\n" % (err.strip() or "no output"))
            return 1
        planted = json.loads(line)
        how = ("libibverbs ibv_dontfork_range() (%s)" % planted["library"]
               if planted["method"] == "verbs" else "madvise(MADV_DONTFORK)")
        w("1. Planted in helper process %d with %s:\n   0x%x-0x%x (%d bytes), over the malloc "
          "arena at 0x%x.\n" % (planted["pid"], how, planted["start"],
                                planted["start"] + planted["length"], planted["length"],
                                planted["arena"]))
        verdict = _doctor_line(doctor, planted["pid"])
        w("2. rdmaspawn doctor --pid %d: %s\n" % (planted["pid"], verdict))
        out_text, err = child.communicate("go\n", timeout=timeout)
        for raw in out_text.splitlines():
            try:
                d = json.loads(raw)
            except ValueError:
                continue
            steps[d.get("step", "?")] = d
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        w("The helper process did not finish within %g s.\n" % timeout)
        return 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    labels = [
        ("os.fork", "os.fork() + exec"),
        ("preexec_fn", "subprocess.run(..., preexec_fn=...)"),
        ("rdmaspawn", "rdmaspawn.Popen(...).wait()"),
    ]
    for i, (key, label) in enumerate(labels, 3):
        result = steps.get(key, {}).get("result", "did not run")
        w("%d. %-38s -> %s\n" % (i, label, result))
    if child.returncode != 0:
        w("\nThe helper process itself ended with status %s:\n%s\n" % (child.returncode, err.strip()))
        return 1
    forked = [steps.get(k, {}).get("result", "") for k in ("os.fork", "preexec_fn")]
    ours = steps.get("rdmaspawn", {}).get("result", "")
    ok = all(r.startswith("killed by") for r in forked) and ours == "exit 0"
    if ok:
        w("\nAs expected: the fork()ed children died before exec; rdmaspawn's child, which\n"
          "shares the parent's memory (CLONE_VM|CLONE_VFORK), ran `true` and exited 0.\n")
        return 0
    w("\nNot as expected (see above): fork()ed children should die, rdmaspawn's should exit 0.\n")
    return 1


def _doctor_line(doctor: Any, pid: int) -> str:
    try:
        report = doctor(pid)
    except OSError as e:
        return "could not inspect (%s)" % e
    if report.ok:
        return "OK"
    worst = report.findings[0] if report.findings else None
    for f in report.findings:
        if f.risk == "high":
            worst = f
            break
    if worst is None:
        return str(report.verdict)
    return "%s -- %s at 0x%x (%s)" % (str(report.verdict), worst.kind, worst.mapping.start,
                                      worst.risk)


def main(argv: Optional[Sequence[str]] = None, prog: str = "rdmaspawn demo") -> int:
    """``rdmaspawn demo``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Show a fork()ed child dying of SIGSEGV in a process with MADV_DONTFORK "
                    "memory, and rdmaspawn's child succeeding in the same process.",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    args = parser.parse_args(argv)
    return run_demo(timeout=args.timeout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

