"""The fork repair keeps the device's writes in the parent (issue 26, item 4).

Runs inside the soft-RoCE VMs of .ci/lanes/rxe.sh on Debian's CPython, in a
venv that sees Debian's python3-pyverbs; elsewhere it skips, except under
RDMASPAWN_REQUIRE_RXE=1 or RDMASPAWN_REQUIRE_PYVERBS=1.  repair_integrity.py
does the work in a throwaway process per mode (``repair``: with
rdmaspawn.repair_fork(); ``control``: without), both with RDMAV_FORK_SAFE=1:
a loopback RC queue pair on rxe0, a target registered in a thread arena's
page, a fork whose child writes its copy of that page, then the parent's own
writes and the device's RDMA WRITE and SEND into the target. ``exact``: the
repair in force before a target of more than three pages with unaligned
ends is registered, so its mark covers the inner pages only, and the child
writes the first and last.

Which kernel this is comes from iproute2 (``rdma system show``: copy-on-fork
on), not from rdmaspawn: where the kernel copies pinned pages at fork (6.1)
the repair must be in force and the child must survive; where it does not
(5.10) the repair must refuse and the marks stay.  Either way the parent
must read the device's bytes and its own, never the child's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from record import record
from test_pyverbs_rxe import HAVE_PYVERBS, _require  # the same skip rules
from verbs import have_device

HERE = Path(__file__).resolve().parent
HELPER = str(HERE / "repair_integrity.py")

_require(have_device() and HAVE_PYVERBS, "no rxe0 or no pyverbs",
         ("RDMASPAWN_REQUIRE_RXE", "RDMASPAWN_REQUIRE_PYVERBS"))


def kernel_copies_at_fork() -> bool:
    """What iproute2 reads from RDMA netlink: does the kernel copy pinned pages at fork?"""
    out = subprocess.run(["rdma", "system", "show"], capture_output=True, text=True,
                         check=True).stdout
    return "copy-on-fork on" in out


COPIES = kernel_copies_at_fork()


@pytest.fixture(scope="module", params=("repair", "exact", "control"))
def run(request):
    """The helper's report for one mode (recorded for the lane)."""
    env = dict(os.environ, RDMAV_FORK_SAFE="1")
    env.pop("RDMAV_USE_MADVISE", None)
    proc = subprocess.run([sys.executable, HELPER, request.param], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"helper {request.param}: exit {proc.returncode}\n{proc.stderr}"
    report = json.loads(proc.stdout.splitlines()[-1])
    record(f"repair-integrity-{request.param}", report)
    return report


def test_parent_reads_the_device_and_itself(run):
    """After the fork the parent sees the device's RDMA WRITE, then its SEND,
    in the target, and its own bytes on the rest of the page: no byte of the
    child's, with the repair or the marks alike."""
    if run["mode"] != "exact" or not COPIES:
        assert run["dc_before_repair"] is True, run  # libibverbs marked the page
    assert run["rdma_write"]["ok"], run
    assert run["after_write"] == run["expected"]["after_write"], run
    assert run["send"]["ok"] and run["recv"]["ok"], run
    assert run["after_send"] == run["expected"]["after_send"], run
    assert run["spare"] == run["expected"]["spare"], run


def test_repair_in_force_where_the_kernel_copies(run):
    """On a kernel that copies pinned pages at fork (6.1): the repair is
    active, the page is no longer ``dc`` at the fork, and the child that
    writes its copy of the page exits 0."""
    if not COPIES:
        pytest.skip(f"{os.uname().release}: no copy-on-fork (see the refusal test)")
    if run["mode"] == "control":
        # Recorded, not required: what the marks alone do to the child.
        assert run["dc_at_fork"] is True, run
        return
    assert run["repair"]["active"] is True, run
    assert run["dc_at_fork"] is False and run["dc_last_at_fork"] is False, run
    assert run["child_wrote"] is True, run
    assert run["child"] == "exit 0", run
    if run["mode"] == "exact":
        # Registered once the repair was in force: libibverbs' mark covers the
        # inner pages only, never the first and last, which the child wrote.
        assert run["dc_before_repair"] is False and run["dc_inner_at_fork"] is True, run
        assert run["rewritten_after"] >= 1, run


def test_repair_refused_where_the_kernel_does_not_copy(run):
    """On a kernel that does not say it copies pinned pages at fork (5.10):
    repair_fork() refuses, saying why, and the marks stay."""
    if COPIES:
        pytest.skip(f"{os.uname().release}: copy-on-fork on (see the repair test)")
    if run["mode"] == "control":
        assert run["dc_at_fork"] is True, run
        return
    assert run["repair"]["active"] is False, run
    assert "kernel" in run["repair"]["reason"] and "netlink" in run["repair"]["reason"], run
    assert run["dc_at_fork"] is True, run


def test_why_the_repair_refuses_hugetlb_unmarked():
    """The negative: a target on a huge page (2 MiB on x86-64, 32 MiB on
    arm64's 16 KiB pages) whose mark is undone by
    hand (no repair), the parent writing the page before the child.  Where
    the kernel copies pinned pages at fork (6.1) the parent still reads the
    device's bytes; where it does not (5.10, which copies small pinned pages
    but not hugetlb ones) the device's WRITE and SEND land in the page the
    child kept and the parent reads its own bytes from before the fork: what
    the repair would do there, so it refuses.  Needs vm.nr_hugepages > 0
    (rxe.sh's job and the arm64 lane's rxe boot set 2)."""
    env = dict(os.environ, RDMAV_FORK_SAFE="1", RDMAV_HUGEPAGES_SAFE="1")
    env.pop("RDMAV_USE_MADVISE", None)
    proc = subprocess.run([sys.executable, HELPER, "hugetlb"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"helper hugetlb: exit {proc.returncode}\n{proc.stderr}"
    r = json.loads(proc.stdout.splitlines()[-1])
    record("repair-integrity-hugetlb", r)
    assert r["dc_before_repair"] is True and r["dc_at_fork"] is False, r
    assert r["rdma_write"]["ok"] and r["send"]["ok"] and r["recv"]["ok"], r
    assert r["spare"] == r["expected"]["spare"], r
    if COPIES:
        assert r["after_write"] == r["expected"]["after_write"], r
        assert r["after_send"] == r["expected"]["after_send"], r
    else:
        before = "11" * 256  # repair_integrity.BEFORE: the device's bytes went to the child
        assert r["after_write"] == before and r["after_send"] == before, r
