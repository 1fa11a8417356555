"""An mpi4py rank that moves buffers through Open MPI + UCX, then starts children.

    mpirun -np 2 ... python ucx_rank.py WAYS

The two ranks swap 4 MiB buffers (over 1 MiB: UCX's rendezvous registers them
on the device; with UCX_IB_FORK_INIT=try, its default, rdma-core 44 marks
them) and check what arrived.  Then each rank runs WAYS: ``stock`` (CPython's
own ways: the control), ``rdmaspawn`` (rdmaspawn.Popen, subprocess under
patch()), ``repaired`` (rdmaspawn.repair_fork(), then the stock ways) or
``all`` (the stock ways and rdmaspawn.Popen, for a rank under RDMASPAWN=on or
``rdmaspawn run``, where the stock ways are rdmaspawn's).  Rank 0 prints one
JSON line: each rank's count of marked (``dc``) mappings and each way's outcome.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from holder import (  # noqa: E402
    _patched,
    fork_python,
    mp_fork_pool,
    os_fork,
    outcome,
    rdmaspawn_popen,
    subprocess_plain,
    subprocess_preexec,
)
from mpi4py import MPI  # noqa: E402

import rdmaspawn  # noqa: E402

SIZE = 4 << 20
#: Seconds a way may take (the fork Pool bounds itself at 60).
LIMIT = 90
STOCK = {
    "os.fork running Python": fork_python,
    "os.fork+exec": os_fork,
    "subprocess preexec_fn": subprocess_preexec,
    "multiprocessing fork Pool": mp_fork_pool,
    "subprocess": subprocess_plain,
}
WAYS = {
    "stock": STOCK,
    "rdmaspawn": {"rdmaspawn.Popen": rdmaspawn_popen,
                  "patch() subprocess": _patched(subprocess_plain)},
    "repaired": STOCK,
    "all": {**STOCK, "rdmaspawn.Popen": rdmaspawn_popen},
}


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                if d.isdigit() and f.read().rsplit(")", 1)[1].split()[1] == me:
                    found.append(int(d))
        except (OSError, IndexError):
            pass
    return found


def bounded(way: Callable[[], str]) -> str:
    """The way's outcome, or "hung" after LIMIT s: a control child that
    deadlocks must not hang the rank (its children are then killed)."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"hung (no outcome in {LIMIT} s)")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(LIMIT)
    try:
        return outcome(way)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def marked() -> int:
    """How many mappings of this process are ``dc`` (MADV_DONTFORK) in smaps."""
    with open("/proc/self/smaps") as f:
        return sum(1 for line in f if line.startswith("VmFlags:") and " dc" in line)


def main() -> int:
    ways = sys.argv[1]
    comm = MPI.COMM_WORLD
    rank, peer = comm.Get_rank(), 1 - comm.Get_rank()
    moved = 0
    for i in range(4):
        send = bytearray([(rank + i) & 0xFF]) * SIZE
        recv = bytearray(SIZE)
        comm.Sendrecv(send, dest=peer, recvbuf=recv, source=peer)
        assert recv == bytearray([(peer + i) & 0xFF]) * SIZE, f"rank {rank}: bad data"
        moved += SIZE
    report: dict = {"rank": rank, "moved": moved, "dc": marked(),
                    "fork_status": rdmaspawn.fork_status().state,
                    "RDMASPAWN": os.environ.get("RDMASPAWN"),
                    "repair_state": rdmaspawn.fork_status().repair}
    if ways == "repaired":
        report["repair"] = rdmaspawn.repair_fork().active
        report["dc_after_repair"] = marked()
    report["ways"] = {name: bounded(way) for name, way in WAYS[ways].items()}
    reports = comm.gather(report, root=0)
    if rank == 0:
        print("RANKS " + json.dumps(reports), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
