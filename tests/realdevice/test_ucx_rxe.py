"""Open MPI + UCX + mpi4py on the soft-RoCE device: registrations made by a
real third-party stack, the spawns beside them and the doctor's view of them
(issue 28, items 3 and 4).

Runs in the soft-RoCE VM of .ci/lanes/rxe.sh (Linux 6.1, rdma-core 44) on
Debian's CPython in the venv that sees Debian's python3-mpi4py; elsewhere it
skips, except under RDMASPAWN_REQUIRE_RXE=1 with RDMASPAWN_REQUIRE_UCX=1
(the lane sets both), where a missing device or mpi4py fails.  Two ranks
(ucx_rank.py) swap 4 MiB buffers over rxe0 (UCX registers them; its default
UCX_IB_FORK_INIT=try has rdma-core 44 mark them), have the doctor look at
them, then start children; with UCX's defaults, and with its purge on fork
off (UCX_RCACHE_PURGE_ON_FORK=n, UCX_IB_RCACHE_PURGE_ON_FORK=n: its at-fork
handler then leaves the cached buffers marked).  The stock ways are the
control, recorded as they come; every rdmaspawn way must exit 0.

With the purge off the control's children lack pages: os.fork() children die
of SIGSEGV, and a child that runs Python code can hang instead, since UCX's
SIGSEGV handler (inherited) waits on a lock in the child for ever; the
rank bounds each control way (CONTROL_LIMIT, and ucx_rank.STUCK once every
child sits in that handler) and records "hung".  That control has an mpirun
of its own: a control that left a fork Pool broken made the next way in
its rank hang.  With UCX's defaults the stock ways exit 0, and the control
and rdmaspawn's ways share one mpirun: each mpirun cost the 6.1-stack VM 45-60 s
of its CPU (BSD process accounting in the guest, the lane alone), two ranks
of about 20 s each and a doctor of 5-6 s per rank.  `rdmaspawn run` runs
with the purge off, where the stock ways die.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mpistack import require_mpi_stack
from record import record
from streamed import run_streamed

HERE = Path(__file__).resolve().parent
RANK = str(HERE / "ucx_rank.py")
# Open MPI 4.1 takes only mlx devices by default; UD over the IPv4 GID times out.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
          "--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any",
          "--mca", "pml_ucx_devices", "any"]
# The ranks' messages go through the UCX pml alone, so of the BTLs only
# "self": "^openib,tcp,vader" left Debian's ofi (libfabric, which opens its
# own providers) and sm, and a rank's MPI_Init took 4.2 s of the TCG guest's
# CPU against 3.2 s with "self".
UCX = {"UCX_TLS": "rc_verbs,ud_verbs,self", "UCX_NET_DEVICES": "rxe0:1",
       "UCX_IB_GID_INDEX": "0", "OMPI_MCA_btl": "self"}
PURGE: dict[str, dict[str, str]] = {
    "defaults": {},
    "purge off": {"UCX_RCACHE_PURGE_ON_FORK": "n", "UCX_IB_RCACHE_PURGE_ON_FORK": "n"},
}
#: Seconds a control way may take before it is recorded as hung: a healthy
#: one takes a few (TCG, a loaded machine), a deadlocked child would take
#: for ever, and every second of it is the VM's idle time.
CONTROL_LIMIT = 30


require_mpi_stack()


def _mpirun(steps: str, purge: str, say, prefix: tuple[str, ...] = (),
            limit: int | None = None) -> list[dict]:
    """The ranks' reports; each way's outcome goes to ``say`` as it ends."""
    e = {**os.environ, **UCX, **PURGE[purge]}
    names = sorted({*UCX, *PURGE[purge]})
    exports = [a for n in names for a in ("-x", n)]
    bound = [] if limit is None else [str(limit)]
    returncode, stdout, stderr = run_streamed(
        [*prefix, *MPIRUN, *exports, sys.executable, RANK, steps, *bound], e, say, "WAY ", purge)
    lines = [x for x in stdout.splitlines() if x.startswith("RANKS ")]
    assert returncode == 0 and lines, (returncode, stdout[-3000:], stderr[-3000:])
    ranks: list[dict] = json.loads(lines[-1][len("RANKS "):])
    assert [x["moved"] for x in ranks] == [16 << 20] * 2, ranks
    return ranks


def _all_exit_0(ranks: list[dict], after: int = 0) -> None:
    """Every way exits 0, from each rank's way number ``after`` on (JSON
    keeps their order: a control's ways come first)."""
    bad = {f"rank {x['rank']}: {w}": o for x in ranks
           for w, o in list(x["ways"].items())[after:] if o != "exit 0"}
    assert not bad, (bad, ranks)


def _doctor_knows(ranks: list[dict], purge: str, protected: bool) -> None:
    """What the doctor said of each rank (it ran while the buffers were
    registered): UCX loaded, its fork_init default, its purge as set, and the
    protection as it is: by the patch at least where RDMASPAWN is on."""
    for x in ranks:
        d = x["doctor"]
        assert d["exit"] in (0, 1), x   # 1: a HAZARD verdict, still a report
        assert d["ucx"]["loaded"] is True, x
        assert d["ucx"]["fork_init"] == "try (default)", x
        assert d["ucx"]["purge_on_fork"] is (purge == "defaults"), x
        if protected:
            assert d["rdmaspawn"]["protection"] == "protected", x
            assert "patch" in d["rdmaspawn"]["protected_by"], x
        else:
            assert d["rdmaspawn"]["protection"] == "not protected", x


# With the purge off the stock ways die, and their children can be left stuck
# in UCX's SIGSEGV handler: the control gets an mpirun of its own, and so do
# rdmaspawn's ways after it.  With UCX's defaults every stock way exits 0, so
# the control and rdmaspawn's ways share one mpirun (test_defaults_...).
def test_stock_ways_control(progress):
    """The control with the purge off: CPython's own ways after UCX's
    traffic, recorded as they come (RDMASPAWN_RXE_OUT/py311-ucx-control-*.json
    and the output), each bounded at CONTROL_LIMIT s."""
    ranks = _mpirun("doctor+stock", "purge off", progress, limit=CONTROL_LIMIT)
    record("ucx-control-purge-off", {"ranks": ranks})
    assert all(x["dc"] > 0 for x in ranks), ranks  # UCX's registrations are marked
    assert all(len(x["ways"]) == 5 for x in ranks), ranks
    _doctor_knows(ranks, "purge off", protected=False)


def test_rdmaspawn_ways_and_repair_fork(progress):
    """With the purge off: rdmaspawn.Popen and subprocess under patch() in
    each rank, then rdmaspawn.repair_fork() and the stock ways: every one
    exits 0."""
    ranks = _mpirun("rdmaspawn+repaired", "purge off", progress)
    record("ucx-rdmaspawn-purge-off", {"ranks": ranks})
    assert all(x["repair"] for x in ranks), ranks
    assert all(len(x["ways"]) == 2 + 1 + 5 for x in ranks), ranks
    _all_exit_0(ranks)


def test_defaults_control_then_rdmaspawn_ways(progress):
    """With UCX's defaults, in one mpirun: the doctor, the stock ways (the
    control, recorded as they come: UCX's at-fork purge un-marks its cached
    buffers, and each has exited 0 in this lane's runs), then rdmaspawn's
    ways and the repair's, every one of which exits 0."""
    ranks = _mpirun("doctor+stock+rdmaspawn+repaired", "defaults", progress)
    record("ucx-defaults", {"ranks": ranks})
    assert all(x["dc"] > 0 for x in ranks), ranks
    assert all(len(x["ways"]) == 5 + 2 + 1 + 5 for x in ranks), ranks
    assert all(x["repair"] for x in ranks), ranks
    _all_exit_0(ranks, after=5)  # the control's five are recorded, not judged
    _doctor_knows(ranks, "defaults", protected=False)


# `rdmaspawn run` with the purge off only: there the stock ways die, so
# there they have something to protect from.  `rdmaspawn run -- mpirun` is
# how RDMASPAWN reaches the ranks here: on one node they inherit mpirun's
# environment, so what `mpirun -x RDMASPAWN=on` showed (it had an mpirun of
# its own) this shows too: the variable in every rank, read at its start-up
# (`on` itself, the shorthand, is test_autostart.py's).
def test_mpirun_under_rdmaspawn_run(progress):
    """The whole mpirun under ``rdmaspawn run``, with the purge off: the
    ranks get its RDMASPAWN (the repair or the patch from start-up), every
    way exits 0, and the doctor calls each rank protected."""
    ranks = _mpirun("doctor+stock+popen", "purge off", progress,
                    prefix=(sys.executable, "-m", "rdmaspawn", "run", "--"))
    record("ucx-rdmaspawn-run-purge-off", {"ranks": ranks})
    assert all(x["RDMASPAWN"] for x in ranks), ranks  # run's variable reached the ranks
    _all_exit_0(ranks)
    _doctor_knows(ranks, "purge off", protected=True)
