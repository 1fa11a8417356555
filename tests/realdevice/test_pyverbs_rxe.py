"""Registrations made by pyverbs (rdma-core's own bindings) on rxe0.

Runs inside the soft-RoCE VM of .ci/lanes/rxe.sh on Debian's CPython, in a
venv that sees Debian's python3-pyverbs (rdma-core 44, the system
libibverbs).  Elsewhere it skips, except under RDMASPAWN_REQUIRE_RXE=1 or
RDMASPAWN_REQUIRE_PYVERBS=1 (the lane sets both), where a missing device or
a missing pyverbs fails.  Each registration is held by a throwaway process
(pyverbs_holder.py) with RDMAV_FORK_SAFE=1: a page pyverbs allocated itself,
and 256 bytes of a thread's malloc arena registered where they lie.  The
stock ways (os.fork() + exec, subprocess with preexec_fn) are the control:
recorded, not assumed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from record import record
from verbs import PAGE, have_device

from rdmaspawn.tools.doctor.cli import main as doctor_cli

HERE = Path(__file__).resolve().parent
HOLDER = str(HERE / "pyverbs_holder.py")
# fork_status() states that tell a caller fork() is safe: never while pages are marked.
NO_HAZARD = ("unneeded", "disabled", "unavailable")


def _require(ok: bool, why: str, variables: tuple[str, ...]) -> None:
    if ok:
        return
    if any(os.environ.get(v) == "1" for v in variables):
        pytest.fail(f"{'/'.join(variables)}=1 but {why}", pytrace=False)
    pytest.skip(f"{why}: runs in the soft-RoCE VM (.ci/lanes/rxe.sh)", allow_module_level=True)


_require(have_device(), "there is no RDMA device (/dev/infiniband/uverbs0)",
         ("RDMASPAWN_REQUIRE_RXE", "RDMASPAWN_REQUIRE_PYVERBS"))
try:
    import pyverbs.mr  # noqa: F401  (pyverbs_holder.py uses it; here only: is it there)
    HAVE_PYVERBS = True
except ImportError:
    HAVE_PYVERBS = False
_require(HAVE_PYVERBS, f"pyverbs does not import in {sys.executable}",
         ("RDMASPAWN_REQUIRE_RXE", "RDMASPAWN_REQUIRE_PYVERBS"))


#: The holders by pid, for the tests that talk to one (a line on its stdin).
_HOLDERS: dict[int, subprocess.Popen] = {}


@pytest.fixture(scope="module", params=("own", "arena"))
def held(request):
    """A holder per kind that registered through pyverbs, ran the ways, and holds on."""
    proc = subprocess.Popen([sys.executable, HOLDER, request.param],
                            env=dict(os.environ, RDMAV_FORK_SAFE="1"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    assert line, f"pyverbs holder {request.param} died: exit {proc.wait()}"
    report = json.loads(line)
    record(f"pyverbs-{request.param}", report)  # the control's outcome among the rest
    assert proc.stdout.readline() == "holding\n"
    _HOLDERS[proc.pid] = proc
    yield proc.pid, report
    del _HOLDERS[proc.pid]
    proc.stdin.close()
    assert proc.wait() == 0


def test_registration_is_marked(held):
    """pyverbs registered on rxe0 and every registered page is ``dc`` in smaps;
    the arena's block lies where it was malloc()ed (not a pyverbs copy)."""
    _, r = held
    assert r["device"] == "rxe0"
    assert r["dc"] is True, r
    assert r["length"] == (PAGE if r["kind"] == "own" else 256), r  # a whole page: 16 KiB on arm64-16k


def test_fork_status_is_not_no_hazard(held):
    """fork_status() never says fork() is safe while pyverbs' pages are marked
    (rdma-core 44 on Linux 6.1 answers IBV_FORK_UNNEEDED and still marks)."""
    _, r = held
    assert r["fork_status"] not in NO_HAZARD, r


def test_stock_ways_control(held):
    """The control: os.fork() + exec and subprocess with preexec_fn, recorded
    by the fixture (RDMASPAWN_RXE_OUT/py311-pyverbs-KIND.json); here only that
    both ran to an outcome."""
    _, r = held
    assert {"os.fork+exec", "subprocess preexec_fn"} <= set(r["ways"]), r


def test_rdmaspawn_ways(held):
    """rdmaspawn.Popen and subprocess under patch() start ``true``: exit 0."""
    _, r = held
    assert r["ways"]["rdmaspawn.Popen"] == "exit 0", r
    assert r["ways"]["patch() subprocess"] == "exit 0", r


def test_doctor_pid(held):
    """doctor --pid on the holder: HAZARD for both, since both pages are
    malloc's: the thread arena's (its header shares the page) and, for
    pyverbs' own buffer, the main heap's (posix_memalign(); checked in maps)."""
    pid, r = held
    if r["kind"] == "own":
        assert r["where"] == "[heap]", r
    stdout, code = _doctor("--pid", str(pid))
    report = json.loads(stdout)
    kinds = {f["kind"] for f in report["findings"] if f["risk"] != "none"}
    assert report["verdict"] == "HAZARD", report["findings"]
    assert kinds == ({"heap"} if r["kind"] == "own" else {"arena"}), report["findings"]
    assert code == 1


def test_doctor_pid_sees_the_protection(held):
    """The doctor's protection markers on real registrations (issue 28, item
    4): the holder is "not protected" until it puts patch() and
    guard("raise") in force, then "protected" by both; and the guard, asked to
    fork, refuses exactly where the doctor says HAZARD (one rule)."""
    pid, r = held
    before = json.loads(_doctor("--pid", str(pid))[0])
    assert before["rdmaspawn"]["protection"] == "not protected", before["rdmaspawn"]
    proc = _HOLDERS[pid]
    proc.stdin.write("protect\n")
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    after = json.loads(_doctor("--pid", str(pid))[0])
    record(f"pyverbs-{r['kind']}-protected", {"guard": answer, "doctor": after["rdmaspawn"],
                                               "verdict": after["verdict"]})
    assert after["rdmaspawn"]["protection"] == "protected", after["rdmaspawn"]
    assert {"patch", "guard"} <= set(after["rdmaspawn"]["protected_by"]), after["rdmaspawn"]
    assert answer["guard"] == ("refused" if after["verdict"] == "HAZARD" else "allowed: exit 0")


def test_doctor_labels_the_arena_header_only_where_one_is(held):
    """The arena kind's page is its thread heap's first (heap_info and
    malloc_state); pyverbs' own page lies in the main heap: no arena label."""
    pid, r = held
    report = json.loads(_doctor("--pid", str(pid))[0])
    said = [f["note"] for f in report["findings"] if f["risk"] != "none"]
    headers = [w for w in said if "heap_info header" in w]
    if r["kind"] == "arena":
        assert headers, said
    else:
        assert not headers and not any("arena" in w for w in said), said


def _doctor(*args: str) -> tuple[str, int]:
    """``rdmaspawn doctor ARGS --json`` in this process (an interpreter costs
    seconds in the VM): its output and exit status."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = doctor_cli([*args, "--json"])
    return out.getvalue(), code
