"""A real job on the real device: torch's DataLoader with fork workers in a
process that registered memory on rxe0 with the mark (issue 26, item 5).

Runs in the soft-RoCE VM of .ci/lanes/rxe.sh (Linux 6.1, which reports
copy-on-fork) on a CPython 3.11 venv with torch; elsewhere it skips, except
under RDMASPAWN_REQUIRE_RXE=1 with RDMASPAWN_REQUIRE_TORCH=1 (the lane sets
both), where a missing device or torch fails. The control (no rdmaspawn) is
recorded as it comes and must not succeed; under ``rdmaspawn run`` the fork
repair is in force from start-up, the start method stays ``fork``, and the
loader finishes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from needs import require
from record import record
from streamed import run_streamed
from verbs import have_device

HERE = Path(__file__).resolve().parent
LOADER = str(HERE / "torch_loader.py")
MARKING = dict(os.environ, RDMAV_FORK_SAFE="1")


_VARIABLES = ("RDMASPAWN_REQUIRE_RXE", "RDMASPAWN_REQUIRE_TORCH")


require(have_device(), "there is no RDMA device (/dev/infiniband/uverbs0)", *_VARIABLES)
# Found, not imported: importing torch took the TCG guest 64-74 s of CPU, and
# only the loader's processes use it (a torch that fails to import fails them).
require(importlib.util.find_spec("torch") is not None,
        f"torch is not installed for {sys.executable}", *_VARIABLES)


def _run(prefix: list[str], label: str, say) -> dict:
    returncode, stdout, stderr = run_streamed([*prefix, sys.executable, LOADER], MARKING, say,
                                              "STEP ", label)
    assert returncode == 0, (returncode, stdout[-2000:], stderr[-4000:])
    return json.loads(stdout.strip().splitlines()[-1])


def test_the_control_does_not_finish(progress):
    """Without rdmaspawn the workers fork with the arena's page marked: the
    DataLoader reports their death (recorded as it comes)."""
    r = _run([], "control", progress)
    record("torch-control", r)
    assert r["dc"] is True and r["repair"] is False, r
    assert r["outcome"] != "ok", r


def test_under_rdmaspawn_run_the_fork_workers_finish(progress):
    """`rdmaspawn run`: the repair is in force from start-up (the kernel reports
    copy-on-fork), multiprocessing stays on fork, and the loader finishes."""
    from rdmaspawn._host.rdmanetlink import rdma_netlink_copy_on_fork

    copies, how = rdma_netlink_copy_on_fork()
    assert copies, f"this VM's kernel should report copy-on-fork: {how}"
    r = _run([sys.executable, "-m", "rdmaspawn", "run", "--"], "rdmaspawn run", progress)
    record("torch-rdmaspawn-run", r)
    assert (r["dc"], r["repair"], r["start_method"], r["outcome"]) == (True, True, "fork", "ok"), r
