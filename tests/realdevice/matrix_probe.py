"""The rdma-core matrix's cells for one libibverbs: how each way of turning fork protection on behaves.

    python matrix_probe.py

The libibverbs is whichever the environment selects (LD_LIBRARY_PATH,
RDMAV_DRIVERS: see matrix.sh).  For each SETUP, a child forked before
libibverbs is loaded (so the fork is harmless, and the imports are paid
once): ``none`` (nothing asked), ``env`` (RDMAV_FORK_SAFE=1 set before
libibverbs loads), ``ibv_fork_init`` (called before registering) or
``rdmaspawn.fork_init`` (the same through rdmaspawn, which skips it where the
kernel copies pinned pages).  The child registers a thread arena's malloc
block on the first device (verbs.py's ``malloc``) and prints one JSON line:
what ibv_fork_init() returned, what ibv_is_fork_initialized() answers,
whether the page is ``dc``, whether a fork() child (which only _exits) dies,
and what rdmaspawn.fork_status(), rdmaspawn.fork_init() and the doctor say;
then rdmaspawn.repair_fork(): in force or refused, the page's mark and the
same fork() child after it.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verbs  # noqa: E402

import rdmaspawn  # noqa: E402
from rdmaspawn._host.procfs import is_dontfork  # noqa: E402
from rdmaspawn.tools.doctor import doctor  # noqa: E402


def fork_child() -> str:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else \
        f"exit {os.WEXITSTATUS(status)}"


SETUPS = ("none", "env", "ibv_fork_init", "rdmaspawn.fork_init")


def cell(setup: str) -> dict:
    out: dict = {"setup": setup}
    if setup == "env":
        os.environ["RDMAV_FORK_SAFE"] = "1"
    if setup == "rdmaspawn.fork_init":
        try:
            out["fork_init"] = rdmaspawn.fork_init().state
        except rdmaspawn.ForkInitError as e:
            out["fork_init"] = f"ForkInitError {e.errno}"
    device = verbs.Device()
    if setup == "ibv_fork_init":
        out["ibv_fork_init"] = device.lib.ibv_fork_init()
    address = device.register_kind("malloc")
    status = rdmaspawn.fork_status()
    out.update(
        library=os.path.basename(os.path.realpath(status.library or "")),
        provider=sorted({line.split()[-1] for line in open("/proc/self/maps")
                         if "librxe" in line}),
        kernel=os.uname().release,
        ibv_is_fork_initialized=device.fork_state(),
        dc=is_dontfork(address),
        fork_status=status.state,
    )
    if "fork_init" not in out:
        try:
            out["fork_init"] = rdmaspawn.fork_init().state
        except rdmaspawn.ForkInitError as e:
            out["fork_init"] = f"ForkInitError {e.errno}"
    report = doctor(None)
    out.update(doctor=report.verdict, doctor_case=report.fork_protection.case,
               fork=fork_child())
    # Then the fork repair, on the same registration: in force only where the
    # kernel reports copy-on-fork, and then the same fork() child survives.
    repair = rdmaspawn.repair_fork()
    out.update(repair="in force" if repair.active else "refused",
               repaired_dc=is_dontfork(address), repaired_fork=fork_child())
    return out


def main() -> int:
    if any("ibverbs" in line for line in open("/proc/self/maps")):
        raise SystemExit("libibverbs is loaded already: the setups need a fresh one each")
    failed = 0
    for setup in SETUPS:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                print(json.dumps(cell(setup)), flush=True)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            print(f"matrix_probe: {setup}: wait status {status}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
