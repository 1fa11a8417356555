"""Real registrations on a soft-RoCE device (rxe0): every spawn way, fork_status(), doctor.

Runs inside the VM of .ci/lanes/rxe.sh (tests/realdevice/rxe_vm.sh boots it);
elsewhere it skips, except under RDMASPAWN_REQUIRE_RXE=1 (the lane sets it),
where a missing device fails.  Each registration is held by a throwaway
process (holder.py) with RDMAV_FORK_SAFE=1, so that libibverbs marks it
MADV_DONTFORK as a job with fork protection on does.  The stock CPython ways
are the control: their outcome is recorded (RDMASPAWN_RXE_OUT, and in the
test's output), not assumed, except for the lone page, where nothing else
lives and fork() has to work.
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
import verbs
from record import record
from verbs import have_device

from rdmaspawn.tools.doctor.cli import main as doctor_cli

HERE = Path(__file__).resolve().parent
HOLDER = str(HERE / "holder.py")
#: The registrations to hold: each of verbs.KINDS unless RDMASPAWN_RXE_KINDS
#: names fewer.  The rxe lane's VMs (x86-64) hold malloc's alone: where the
#: kernel matters, in the doctor's verdict and the repair's answer, the kinds
#: answer alike; each kind took the 5.10 VM 26-32 s, alone on this machine.
#: The arm64 lane's soft-RoCE boot (6.12, 16 KiB pages) holds all three.
KINDS = tuple(os.environ.get("RDMASPAWN_RXE_KINDS", " ".join(verbs.KINDS)).split())
assert KINDS and set(KINDS) <= set(verbs.KINDS), f"RDMASPAWN_RXE_KINDS: {KINDS}"
MARKING = dict(os.environ, RDMAV_FORK_SAFE="1")
# What an rdmaspawn way may do instead of starting the child: refuse, in words.
REFUSALS = ("raised PreexecFnError", "raised ForkHazardError")


if not have_device():
    if os.environ.get("RDMASPAWN_REQUIRE_RXE") == "1":
        pytest.fail("RDMASPAWN_REQUIRE_RXE=1 but there is no RDMA device "
                    "(/dev/infiniband/uverbs0, /sys/class/infiniband)", pytrace=False)
    pytest.skip("no RDMA device: runs in the soft-RoCE VM (.ci/lanes/rxe.sh)",
                allow_module_level=True)


class Holder:
    """holder.py holding a registration of one kind, after running the ways of ``mode``."""

    def __init__(self, kind: str, mode: str, prefix: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, HOLDER, kind, mode, "--hold"], env=MARKING,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"holder {kind} {mode} died: exit {self.proc.wait()}"
        self.report = json.loads(line)
        assert self.proc.stdout.readline() == "holding\n"
        self.pid = self.proc.pid

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait() == 0


@pytest.fixture(scope="module", params=KINDS)
def held(request):
    """A holder per kind that ran the stock and the rdmaspawn ways, then holds on."""
    h = Holder(request.param, "stock+rdmaspawn")
    yield h
    h.close()


def test_registration_is_marked(held):
    """The registration is real and fork protection marks its page ``dc``."""
    r = held.report
    assert r["device"] == "rxe0"
    assert r["dc"] is True, r


def test_fork_status_is_not_no_hazard_while_marked(held):
    """fork_status() never says 'unneeded' or 'disabled' while the page is marked
    (rdma-core 44 on Linux 6.1 answers IBV_FORK_UNNEEDED here)."""
    r = held.report
    assert r["fork_status"] == "enabled", r


def test_stock_ways_control(held):
    """The control: CPython's own ways, recorded; on the lone page fork() works."""
    r = held.report
    record(f"stock-{r['kind']}", r)
    stock = {k: v for k, v in r["ways"].items() if not k.startswith(("rdmaspawn", "patch()"))}
    assert len(stock) == 5
    if r["kind"] == "page":
        assert set(stock.values()) == {"exit 0"}, stock


def test_rdmaspawn_ways(held):
    """rdmaspawn.Popen and subprocess under patch(): the child runs, or a
    preexec_fn (which needs fork) is refused in words; never a crash."""
    ways = {k: v for k, v in held.report["ways"].items() if k.startswith(("rdmaspawn", "patch()"))}
    assert len(ways) == 4
    for way, result in ways.items():
        if way.endswith("preexec_fn"):
            assert result.startswith(("exit 0",) + REFUSALS), (way, result)
        else:
            assert result == "exit 0", (way, result)


def _doctor(*args: str) -> tuple[str, int]:
    """``rdmaspawn doctor ARGS --json``: its output and exit status.  Its CLI
    runs in this process, since starting an interpreter costs seconds in the VM."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = doctor_cli([*args, "--json"])
    return out.getvalue(), code


def test_doctor_pid(held):
    """doctor --pid on the real holder: HAZARD where malloc's arena or Python's
    objects share the page, OK for the lone page; the uverbs mappings
    (doorbells, /dev/infiniband/uverbs0) never count."""
    stdout, code = _doctor("--pid", str(held.pid))
    report = json.loads(stdout)
    kind = held.report["kind"]
    record(f"doctor-{kind}", {"verdict": report["verdict"], "findings": report["findings"]})
    with open(f"/proc/{held.pid}/maps") as f:
        assert "/dev/infiniband/uverbs" in f.read()  # the completion queue's ring
    device = [f for f in report["findings"] if "infiniband" in (f["path"] or "")]
    assert all(f["risk"] == "none" for f in device), device
    assert report["verdict"] == ("OK" if kind == "page" else "HAZARD"), report["findings"]
    assert code == (0 if kind == "page" else 1)


def test_doctor_all(held):
    """doctor --all names the holder, hazardous unless it holds the lone page."""
    stdout, code = _doctor("--all")
    lines = [json.loads(x) for x in stdout.splitlines()]
    mine = [x for x in lines if x.get("type") == "process" and x["pid"] == held.pid]
    assert len(mine) == 1, lines
    assert mine[0]["hazardous"] is (held.report["kind"] != "page"), mine[0]
    if held.report["kind"] != "page":
        assert code == 1


# One kind: `rdmaspawn run` protects a process the same way whatever its
# registration is, and malloc's is the one whose stock forks die (the marked
# page holds its thread arena's header, which glibc's fork handler writes).
# Each kind cost 1-2 minutes of a loaded CI's VM on 5.10, where
# multiprocessing's default goes to forkserver.
@pytest.mark.parametrize("kind", ["malloc"])
def test_rdmaspawn_run_child(kind):
    """A Python started under `rdmaspawn run` registers memory, then uses every
    way (multiprocessing's default included): none crashes; where the kernel
    reports copy-on-fork (the repair in force), none is refused either."""
    h = Holder(kind, "all", prefix=(sys.executable, "-m", "rdmaspawn", "run", "--"))
    h.close()
    r = h.report
    record(f"run-{kind}", r)
    assert r["dc"] is True
    assert len(r["ways"]) == 6
    for way, result in r["ways"].items():
        assert result == "exit 0" or result.startswith(REFUSALS), (way, result)
    from rdmaspawn._host.rdmanetlink import rdma_netlink_copy_on_fork

    if rdma_netlink_copy_on_fork()[0]:  # the fork repair is in force from start-up: nothing refused
        assert set(r["ways"].values()) == {"exit 0"}, r["ways"]


@pytest.mark.parametrize("kind", KINDS)
def test_fork_repair_on_real_registrations(kind):
    """rdmaspawn.repair_fork() in a process that registered on rxe0 with the mark
    (RDMAV_FORK_SAFE=1): where RDMA netlink reports copy-on-fork (Linux 6.1) it
    is in force, and every stock way and every fork that runs Python or C code
    in the child exits 0, where the control above dies; a registration that
    shares its page with malloc's data is no longer marked, one on a page of
    its own keeps its mark (a child needs nothing there, and the kernel then
    copies none of it: the sweep's rule, the doctor's); where it does not
    (Linux 5.10), it refuses in one line and the mark, and today's outcome,
    stay."""
    from rdmaspawn._host.rdmanetlink import rdma_netlink_copy_on_fork

    h = Holder(kind, "repaired")
    h.close()
    r = h.report
    record(f"repaired-{kind}", r)
    assert r["dc"] is True, r
    copies, how = rdma_netlink_copy_on_fork()
    if copies:
        assert r["repair"]["active"] and r["repair"]["libraries"] == 1, r
        assert r["dc_after"] is (kind == "page"), r
        assert set(r["ways"].values()) == {"exit 0"}, r["ways"]
    else:
        assert not r["repair"]["active"] and how in r["repair"]["reason"], r
        assert "\n" not in r["repair"]["reason"], r
        assert r["dc_after"] is True, r
        if kind == "malloc":  # the arena's page: the fork children die, as in the control
            assert r["ways"]["os.fork running Python"] != "exit 0", r["ways"]


# A fresh process: libibverbs loaded by ctypes, then fork_status() (or not),
# then ibv_fork_init(), as UCX (UCX_IB_FORK_INIT) or NCCL call it before
# registering. Prints what the library answers before and ibv_fork_init()'s
# return value.
_FORK_INIT_AFTER = """
import ctypes, json, sys
lib = ctypes.CDLL("libibverbs.so.1")
before = lib.ibv_is_fork_initialized() if hasattr(lib, "ibv_is_fork_initialized") else None
if sys.argv[1] == "status":
    import rdmaspawn
    rdmaspawn.fork_status()
print(json.dumps({"answers": before, "ibv_fork_init": lib.ibv_fork_init()}))
"""


def _fork_init_after(first: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _FORK_INIT_AFTER, first], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout)


def test_fork_status_leaves_ibv_fork_init_alone():
    """fork_status() has no effect on the library: a later ibv_fork_init()
    returns what it returns alone (issue 27, item 7). rdma-core 35-50 answer
    "unneeded" on Linux 6.1, and asking them to mark a probe range there set
    their too_late flag: ibv_fork_init() then returned EINVAL."""
    alone = _fork_init_after("alone")
    after = _fork_init_after("status")
    record("fork-init-after-fork-status", {"alone": alone, "after_fork_status": after})
    assert alone["ibv_fork_init"] == 0, alone
    assert after == alone, (after, alone)
