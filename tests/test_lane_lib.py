""".ci/lanes/lane_lib.sh, what the arm64 and sid lanes share, and .ci/run's
summary of a lane.

wait_for_wheel takes a wheel only once it reads as a whole zip (the sid
lane used to take whatever name appeared, while build-wheels was still
copying it in); closing_lines prints a log's summary or its tail;
lane_closing picks a lane's verdict lines out of its log.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / ".ci" / "lanes" / "lane_lib.sh"
GLOB = "rdmaspawn-*-manylinux_2_28_x86_64.whl"


def lib(call: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f". '{LIB}'; {call}"], capture_output=True,
                          text=True, timeout=60, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})


def test_wait_for_wheel_takes_only_a_whole_zip(tmp_path):
    assert lib(f"wait_for_wheel '{tmp_path}' '{GLOB}' 0").returncode == 1
    wheel = tmp_path / "rdmaspawn-0.1.0-cp39-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("rdmaspawn/__init__.py", "x = 1\n" * 1000)
    whole = wheel.read_bytes()
    wheel.write_bytes(whole[: len(whole) // 2])  # still being copied in
    res = lib(f"wait_for_wheel '{tmp_path}' '{GLOB}' 0")
    assert (res.returncode, res.stdout) == (1, ""), res
    wheel.write_bytes(whole)
    res = lib(f"wait_for_wheel '{tmp_path}' '{GLOB}' 0")
    assert (res.returncode, res.stdout) == (0, f"{wheel}\n"), res


def test_closing_lines_from_the_summary_else_the_tail(tmp_path):
    log = tmp_path / "log"
    log.write_text("a\nb\n== short test summary info ==\nFAILED x\n== 1 failed ==\n")
    res = lib(f"closing_lines '{log}' '= short test summary info =' 1")
    assert res.stdout == "== short test summary info ==\nFAILED x\n== 1 failed ==\n"
    log.write_text("a\nb\nc\n")
    assert lib(f"closing_lines '{log}' '= short test summary info =' 2").stdout == "b\nc\n"
    assert lib(f"closing_lines '{tmp_path}/none' x 2").stdout == ""


# A lane's log as the sid lane leaves it: a test_subprocess run in which one
# test failed under load and passed when the runner reran it alone, then a
# pytest run with a failing test.
_SID_LOG = """\
FAIL: test_leak_fast_process_del_killed (test.test_subprocess.POSIXProcessTestCase)
FAILED (failures=1, skipped=49)
rdmaspawn conformance, python 3.15: 366 tests in 41s, 1 failures, 0 errors, 49 skipped
  rerun alone: 1 tests, 0 failures, 0 errors (failed, then passed alone)
  patch in force: yes; engine spawns: 2468; CPython fork_exec fallbacks (preexec_fn): 8
FAILED tests/test_guard.py::test_x - assert 0
ERROR tests/test_guard.py::test_y - OSError
=========== 1 failed, 378 passed, 1 error in 183.00s (0:03:03) ===========
LANE: 6 passed, 1 failed
"""


def test_lane_closing_shows_the_rerun_not_unittests_failed_line(tmp_path):
    """The summary of a lane: the runner's verdict and its rerun, pytest's
    failing tests and closing line, the lane's count; not unittest's
    "FAILED (failures=1)", which there read as the run's verdict when the
    rerun alone had passed."""
    log = tmp_path / "lane.log"
    log.write_text(_SID_LOG)
    lines = _SID_LOG.splitlines()
    assert lib(f"lane_closing '{log}'").stdout.splitlines() == lines[2:]


# The rxe lane's log where the watchdog killed a VM: its lines carry the
# VM's name, and the lane's count has a pytest run with no result.
_RXE_LOG = """\
[6.1] realdevice/test_torch_rxe.py::test_the_control_does_not_finish
[6.1] rxe_vm: no output for 121s of the VM's CPU (400s of wall clock; limits 120s, 900s): a hang; killing 42
[6.1] rxe_vm: the watchdog killed the VM
[5.10] FAILED realdevice/test_rxe.py::test_x - assert 0
[5.10] ======== 1 failed, 8 passed in 673.01s (0:11:13) ========
[5.10] rxe_vm: qemu used 259 s of CPU
test_torch_rxe.py on 3.11 + torch (Linux 6.1): no pytest result
VM 6.1: exit 124
LANE: 8 passed, 2 failed
"""


def test_lane_closing_names_the_vm_the_watchdog_killed(tmp_path):
    """A VM lane's failure says which VM, which test and why: the watchdog's
    line, a VM's FAILED lines under its name, the run that left no result."""
    log = tmp_path / "lane.log"
    log.write_text(_RXE_LOG)
    lines = _RXE_LOG.splitlines()
    assert lib(f"lane_closing '{log}'").stdout.splitlines() == [lines[1], *lines[3:]]
