"""An mpi4py rank that moves buffers through Open MPI + UCX, then starts children.

    mpirun -np 2 ... python ucx_rank.py STEPS [LIMIT]

The two ranks swap 4 MiB buffers (over 1 MiB: UCX's rendezvous registers them
on the device; with UCX_IB_FORK_INIT=try, its default, rdma-core 44 marks
them) and check what arrived.  Then each rank takes STEPS, "+"-joined
(GROUPS below): ``doctor``, first wherever it is named, has the doctor
look at the rank from outside (``rdmaspawn doctor --pid PID --json``,
started with rdmaspawn.Popen while the buffers are registered; 5-6 s of the
TCG guest's CPU per rank, so only where a test reads it); then, in order,
``stock`` runs CPython's own ways (the control); ``rdmaspawn``
rdmaspawn.Popen and subprocess under patch(); ``repaired``
rdmaspawn.repair_fork(), then the stock ways; ``popen`` rdmaspawn.Popen
alone (beside ``stock`` in a rank under RDMASPAWN=on or ``rdmaspawn run``,
where the stock ways are rdmaspawn's).  A control whose children can die
has a rank of its own: a child it leaves stuck in UCX's SIGSEGV handler, or
a fork Pool it leaves broken, must not be what a later way meets (a shared
rank's plain subprocess then hung).  Each way is bounded at LIMIT seconds
(default 90; the test gives the control's), and at STUCK seconds once every
child it left sits in a SIGSEGV handler: a child that deadlocks is an
outcome ("hung"), not a hung rank.  Rank 0 prints one JSON line: each
rank's count of marked (``dc``) mappings, the doctor's answers (where it
ran) and each way's outcome; before it, rank 0 prints a line per way as it
ends ("WAY rank 0: NAME: OUTCOME"), which the test shows as progress.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from holder import (  # noqa: E402
    _patched,
    fork_python,
    in_sigsegv_handler,
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
#: Seconds a way may take, unless the command line says (the control's
#: children can deadlock: UCX's SIGSEGV handler, inherited by a fork child
#: that lacks a marked page, waits on a lock for ever).
LIMIT = int(sys.argv[2]) if len(sys.argv) > 2 else 90
#: Seconds in a row that every child of a way may spend inside a SIGSEGV
#: handler before the way is called hung there: UCX's handler waits for ever,
#: and the wait is the VM's idle time (the purge-off control's children sat
#: out 30 s each); printing a backtrace, even under TCG, takes less.
STUCK = 10
STOCK = {
    "os.fork running Python": fork_python,
    "os.fork+exec": os_fork,
    "subprocess preexec_fn": subprocess_preexec,
    "multiprocessing fork Pool": lambda: mp_fork_pool(min(LIMIT, 60)),
    "subprocess": subprocess_plain,
}
#: The ways of each step but ``doctor``, in the order they run.
GROUPS = {
    "stock": STOCK,
    "rdmaspawn": {"rdmaspawn.Popen": rdmaspawn_popen,
                  "patch() subprocess": _patched(subprocess_plain)},
    "repaired": {"repair_fork()": lambda: "exit 0",
                 **{f"repaired {name}": way for name, way in STOCK.items()}},
    "popen": {"rdmaspawn.Popen": rdmaspawn_popen},
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
    """The way's outcome, or "hung" after LIMIT s, or after STUCK s in a row
    with every child inside a SIGSEGV handler: a control child that
    deadlocks must not hang the rank (its children are then killed).  A
    child found inside a SIGSEGV handler then is named as such: it got the
    seed's SIGSEGV, and UCX's handler (inherited) is where it hangs, or still
    prints its backtrace under TCG.

    A thread watches, once a second; the way's thread gets one SIGALRM, sent
    to it alone, when the bound expires.  A SIGALRM every second, sent to
    the process, left a repaired rank's os.fork() + exec hung for 90 s in a
    loaded CI run: a signal that lands in UCX's or Open MPI's threads
    interrupts their calls, and the forks run UCX's at-fork handlers."""
    done = threading.Event()
    why: list[str] = []
    main = threading.get_ident()

    def expire(signum: int, frame: object) -> None:
        if not done.is_set():
            raise TimeoutError(why[0])

    def watch() -> None:
        stuck = 0
        for second in itertools.count(1):
            if done.wait(1):
                return
            children = _children()
            if why:  # expired: the way's own clean-up must not wait on them for ever
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                continue
            stuck = stuck + 1 if children and all(map(in_sigsegv_handler, children)) else 0
            if stuck >= STUCK:
                why.append(f"hung (every child in a SIGSEGV handler for {STUCK} s)")
            elif second >= LIMIT:
                why.append(f"hung (no outcome in {LIMIT} s)")
            else:
                continue
            signal.pthread_kill(main, signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, expire)
    watcher = threading.Thread(target=watch, name="bounded", daemon=True)
    watcher.start()
    in_handler = False
    try:
        result = outcome(way)
    finally:
        done.set()
        watcher.join()
        signal.signal(signal.SIGALRM, previous)
        for pid in _children():
            in_handler = in_sigsegv_handler(pid) or in_handler
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    if in_handler and "hung" in result:
        return f"signal 11, then {result.split(': ', 1)[-1]}"
    return result


def marked() -> int:
    """How many mappings of this process are ``dc`` (MADV_DONTFORK) in smaps."""
    with open("/proc/self/smaps") as f:
        return sum(1 for line in f if line.startswith("VmFlags:") and " dc" in line)


def doctor() -> dict:
    """``rdmaspawn doctor --pid`` of this rank: its exit status and the fields
    that issue 28 asks of it (the verdict, the protection, UCX's settings)."""
    proc = rdmaspawn.Popen([sys.executable, "-m", "rdmaspawn", "doctor", "--pid",
                            str(os.getpid()), "--json"], stdout=rdmaspawn.PIPE, text=True)
    out, _ = proc.communicate(timeout=600)
    report = json.loads(out)
    return {"exit": proc.returncode, "verdict": report.get("verdict"),
            "rdmaspawn": report.get("rdmaspawn"), "ucx": report.get("ucx"),
            "kinds": sorted({f["kind"] for f in report.get("findings", ())
                             if f["risk"] != "none"})}


def main() -> int:
    steps = sys.argv[1].split("+")
    assert set(steps) <= {"doctor", *GROUPS}, f"unknown steps: {steps}"
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
    comm.Barrier()  # both ranks' buffers registered while each doctor looks
    if "doctor" in steps:
        report["doctor"] = doctor()
    report["ways"] = {}
    for name, way in [w for step in steps if step != "doctor" for w in GROUPS[step].items()]:
        if name == "repair_fork()":
            report["repair"] = rdmaspawn.repair_fork().active
            report["dc_after_repair"] = marked()
        report["ways"][name] = bounded(way)
        if rank == 0:  # progress, one rank's (a long line of two ranks could interleave)
            print(f"WAY rank 0: {name}: {report['ways'][name].splitlines()[0][:120]}",
                  flush=True)
    reports = comm.gather(report, root=0)
    if rank == 0:
        print("RANKS " + json.dumps(reports), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
