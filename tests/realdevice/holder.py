"""A process that holds a real registration on rxe0 and starts children every way.

    python holder.py KIND MODE [--hold]

KIND: ``malloc``, ``bytearray`` or ``page`` (see ``verbs.py``).  MODE:
``stock`` runs CPython's own ways (the control), ``rdmaspawn`` runs
rdmaspawn.Popen and subprocess under patch(), ``stock+rdmaspawn`` both,
``all`` the stock ways and rdmaspawn.Popen (for a process started under
``rdmaspawn run``, where the stock ways are patched); ``repaired`` calls
``rdmaspawn.repair_fork()`` after registering, then the stock ways and the
forks that run Python or C code in the child.
Prints one JSON line: the registration, whether its page is ``dc`` in smaps,
``ibv_is_fork_initialized()``, ``rdmaspawn.fork_status()``, and each way's
outcome ("exit 0", "signal 11", "raised ForkHazardError", ...).  With
``--hold`` it then prints ``holding`` and waits for stdin to close, so that
the doctor can inspect it.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.pool
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verbs  # noqa: E402

import rdmaspawn  # noqa: E402
from rdmaspawn._host.procfs import is_dontfork  # noqa: E402

TRUE = ["/bin/true"]


def _status(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit {code}"


def os_fork() -> str:
    pid = os.fork()
    if pid == 0:
        os.execv(TRUE[0], TRUE)
    _, status = os.waitpid(pid, 0)
    return _status(os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode")
                   else (-(status & 0x7F) if status & 0x7F else status >> 8))


def subprocess_plain() -> str:
    return _status(subprocess.run(TRUE).returncode)


def subprocess_preexec() -> str:
    return _status(subprocess.run(TRUE, preexec_fn=lambda: None).returncode)


def subprocess_user() -> str:
    return _status(subprocess.run(TRUE, user=os.getuid()).returncode)


def _noop() -> None:
    pass


def mp_default() -> str:
    p = multiprocessing.Process(target=_noop)
    p.start()
    p.join()
    return _status(p.exitcode if p.exitcode is not None else 255)


def fork_python() -> str:
    """A fork whose child runs Python: allocates, imports, answers through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        junk = [bytearray(4096) for _ in range(2000)]
        del junk
        import decimal  # noqa: F401  (not loaded yet)
        os.write(w, str(sum(range(1000))).encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 100)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    result = _status(os.waitstatus_to_exitcode(status))
    return result if result != "exit 0" or data == b"499500" else f"bad answer {data!r}"


def in_sigsegv_handler(pid: int) -> bool:
    """Whether ``pid`` runs a SIGSEGV handler now: SIGSEGV is blocked while
    one runs (no SA_NODEFER), and no child here blocks it otherwise."""
    try:
        with open(f"/proc/{pid}/status") as f:
            blocked = next(int(x.split()[1], 16) for x in f if x.startswith("SigBlk:"))
    except (OSError, StopIteration, ValueError):
        return False
    return bool(blocked >> (signal.SIGSEGV - 1) & 1)


def mp_fork_pool(limit: int = 60) -> str:
    """A fork Pool's answer, or how its first bad worker fared.  A Pool whose
    workers die starts new ones for ever, each another fork that dies: a busy
    loop that cost the soft-RoCE VM the whole limit of CPU.  So the first
    worker found dead of a signal, or inside a SIGSEGV handler (UCX's, which
    a fork child inherits, waits there for ever), is the outcome; the rest is
    bounded at ``limit`` s."""
    pool = multiprocessing.get_context("fork").Pool(2)
    # A chunk size given: map's own divides by the number of live workers,
    # none once the Pool has reaped dead ones (ZeroDivisionError).
    pending = pool.map_async(abs, range(-8, 0), chunksize=1)
    deadline = time.monotonic() + limit
    bad = ""
    while not bad and not pending.ready():
        # The Pool's own list of its workers (there is no public one).
        for w in list(pool._pool):
            if w.exitcode is not None and w.exitcode < 0:
                bad = f"signal {-w.exitcode} (a Pool worker)"
            elif w.pid is not None and in_sigsegv_handler(w.pid):
                bad = "signal 11 (a Pool worker, hung in a SIGSEGV handler)"
        if not bad and time.monotonic() > deadline:
            bad = f"hung (no result in {limit} s)"
        pending.wait(0.1)
    if bad:
        _abandon(pool)
        return bad
    got = pending.get()
    pool.terminate()
    pool.join()
    return "exit 0" if got == list(range(8, 0, -1)) else f"bad answer {got}"


def _abandon(pool: multiprocessing.pool.Pool) -> None:
    """Stop a Pool that has a dead or stuck worker, without terminate(): that
    waits on the task queue's lock, which a worker holds while it waits for a
    task (a killed one holds it for ever), and SIGTERMs and joins workers,
    which UCX's SIGSEGV handler may keep (SIGTERM blocked).  Its restarts
    stop, its workers get SIGKILL and are reaped, and its exit-time
    terminate() is dropped; its threads (daemons) stay blocked, harmless."""
    pool._worker_handler._state = multiprocessing.pool.TERMINATE
    pool._change_notifier.put(None)  # wakes it from its wait on the workers
    pool._worker_handler.join(10)
    pool._terminate.cancel()
    for w in list(pool._pool):
        w.kill()
        w.join()


def libc_fork() -> str:
    import ctypes

    pid = ctypes.CDLL(None).fork()
    if pid == 0:
        os.execv(TRUE[0], TRUE)
    _, status = os.waitpid(pid, 0)
    return _status(os.waitstatus_to_exitcode(status))


def rdmaspawn_popen() -> str:
    return _status(rdmaspawn.Popen(TRUE).wait())


def _patched(way: Callable[[], str]) -> Callable[[], str]:
    def run() -> str:
        rdmaspawn.patch()
        try:
            return way()
        finally:
            rdmaspawn.unpatch()
    return run


STOCK: dict[str, Callable[[], str]] = {
    "os.fork+exec": os_fork,
    "subprocess": subprocess_plain,
    "subprocess preexec_fn": subprocess_preexec,
    "subprocess user=": subprocess_user,
    "multiprocessing default": mp_default,
}
RDMASPAWN: dict[str, Callable[[], str]] = {
    "rdmaspawn.Popen": rdmaspawn_popen,
    "patch() subprocess": _patched(subprocess_plain),
    "patch() subprocess preexec_fn": _patched(subprocess_preexec),
    "patch() subprocess user=": _patched(subprocess_user),
}
MODES = {
    "stock": STOCK,
    "rdmaspawn": RDMASPAWN,
    "stock+rdmaspawn": {**STOCK, **RDMASPAWN},
    # Under `rdmaspawn run` the stock ways are the patched ones.
    "all": {**STOCK, "rdmaspawn.Popen": rdmaspawn_popen},
    "repaired": {**STOCK, "os.fork running Python": fork_python,
                 "multiprocessing fork Pool": mp_fork_pool, "ctypes libc.fork()": libc_fork},
}


def outcome(way: Callable[[], str]) -> str:
    try:
        return way()
    except Exception as e:  # the outcome to record, whatever it is
        return f"raised {type(e).__name__}: {e}"


def main() -> int:
    kind, mode = sys.argv[1], sys.argv[2]
    device = verbs.Device()
    address = device.register_kind(kind)
    report = {
        "kind": kind,
        "mode": mode,
        "device": device.name,
        "address": f"0x{address:x}",
        "dc": is_dontfork(address),
        "ibv_is_fork_initialized": device.fork_state(),
        "fork_status": rdmaspawn.fork_status().state,
    }
    if mode == "repaired":
        report["repair"] = rdmaspawn.repair_fork()._asdict()
        report["dc_after"] = is_dontfork(address)
    report["ways"] = {name: outcome(way) for name, way in MODES[mode].items()}
    print(json.dumps(report), flush=True)
    if "--hold" in sys.argv:
        print("holding", flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
