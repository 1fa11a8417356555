"""tests/vm_watchdog.sh, the VM lanes' watchdog (issue 27, item 15).

Fake VMs, each started by bash as a lane starts qemu, watched with a limit
of 1 s of the fake's own CPU time: one that spins and prints nothing (hung:
killed by the CPU rule), one stopped with SIGSTOP (starved: it gets no CPU
at all, however long it waits, so it must outlive the CPU rule), one that
prints as it computes (alive: never killed), one that sleeps silently (hung
while idle: killed by the wall-clock cap).  The verdicts rest on CPU time,
which a loaded machine does not inflate, and on ratios of 10 or more; the
wall-clock cap is only ever the reason in the idle case.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "vm_watchdog.sh"

SPIN = "while True: pass"
# A line each 0.05 s of its own CPU time, 2 s of CPU in all, then exit 0.
PRINTING = """
import time
last = 0.0
while time.process_time() < 2.0:
    if time.process_time() - last >= 0.05:
        last = time.process_time()
        print("line", last, flush=True)
"""
# One line, then stopped (no CPU at all) until the test continues it.
STOPPED = """
import os, signal
print("booted", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
print("continued", flush=True)
"""


def watch(tmp_path: Path, fake: list[str], cpu: int, wall: int,
          before_wait: str = "") -> tuple[int, str, str]:
    """Start ``fake`` in the background with its output in a log, as a lane
    starts qemu, and run vm_watch on it: (status, the watchdog's lines, log)."""
    log = tmp_path / "console"
    quoted = " ".join(f"'{a}'" for a in fake)
    script = f"""
set -u
. '{SCRIPT}'
{quoted} >'{log}' 2>&1 &
fake=$!
{before_wait}
VM_WATCH_POLL=0.1 vm_watch "$fake" '{log}' {cpu} {wall} fake
rc=$?
wait "$fake" 2>/dev/null
echo "watch $rc"
"""
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          timeout=300)
    rc = int(proc.stdout.split()[-1])
    return rc, proc.stderr, log.read_text()


def test_hung_vm_spinning_is_killed_by_the_cpu_rule(tmp_path):
    rc, err, _ = watch(tmp_path, [sys.executable, "-c", SPIN], cpu=1, wall=600)
    assert rc == 124, err
    assert "fake: no output for 1s of the VM's CPU" in err, err


def test_starved_vm_is_not_killed(tmp_path):
    """Stopped for 3 s of wall clock, three times the CPU limit: no CPU, no kill."""
    rc, err, log = watch(
        tmp_path, [sys.executable, "-c", STOPPED], cpu=1, wall=600,
        before_wait=f"(until grep -qs booted '{tmp_path / 'console'}'; do sleep 0.1; done;"
                    ' sleep 3; kill -CONT "$fake") &')
    assert rc == 0, err
    assert err == "", err
    assert log.split() == ["booted", "continued"], log


def test_printing_vm_is_not_killed(tmp_path):
    rc, err, log = watch(tmp_path, [sys.executable, "-c", PRINTING], cpu=1, wall=600)
    assert rc == 0, err
    assert err == "", err
    assert log.count("line") >= 20, log


def test_vm_hung_while_idle_is_killed_by_the_wall_cap(tmp_path):
    rc, err, _ = watch(tmp_path, ["sleep", "1000"], cpu=1, wall=2)
    assert rc == 124, err
    assert "s of wall clock; limits 1s, 2s)" in err and "for 0s of the VM's CPU" in err, err
