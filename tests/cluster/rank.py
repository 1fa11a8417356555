"""One rank of the Slurm jobs that tests/cluster/test_slurm.py starts (srun, sbatch).

The rank plants the real DONTFORK hazard (``rdmaspawn.testing.hazard.plant``:
``ibv_fork_init()`` and ``ibv_dontfork_range()`` through the system's
libibverbs, over a malloc arena), then starts children the ways a job does,
each with its API's defaults.  Nothing here mentions rdmaspawn: whether the
children survive depends only on how the job was started (``rdmaspawn run``,
``RDMASPAWN=on`` in the environment, a TaskProlog, or none of them).

It prints one JSON line: ``{"rank": ..., "node": ..., "rdmaspawn": <the
RDMASPAWN variable as the rank saw it>, "hazard": <method>, "ways": {NAME:
"ok" | what went wrong}}`` and exits 0 when no child died and nothing hung (every way "ok", or an
``os.fork()`` refused with rdmaspawn's ForkHazardError), else 1.
Every way that can wait forever is bounded by ``TIMEOUT`` seconds: without
help, a fork ``multiprocessing.Pool``'s workers die and the pool waits for
them forever.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from typing import Callable

TIMEOUT = float(os.environ.get("RDMASPAWN_SLURM_WAY_TIMEOUT", "10"))


def describe(status: int) -> str:
    """A wait status in words: 'ok', 'exit N' or 'signal NAME'."""
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    code = os.WEXITSTATUS(status)
    return "ok" if code == 0 else f"exit {code}"


def returncode(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return "ok" if code == 0 else f"exit {code}"


def way_subprocess() -> str:
    return returncode(subprocess.run(["true"], timeout=TIMEOUT, check=False).returncode)


def way_fork_python() -> str:
    """os.fork() whose child runs Python before it exits (no exec)."""
    pid = os.fork()
    if pid == 0:
        try:
            total = sum(i * i for i in range(1000))
            os._exit(0 if total == 332833500 else 3)
        finally:
            os._exit(4)
    return describe(os.waitpid(pid, 0)[1])


def way_preexec_fn() -> str:
    """preexec_fn=os.setsid, the common one (rdmaspawn runs it without fork)."""
    return returncode(subprocess.run(["true"], preexec_fn=os.setsid, timeout=TIMEOUT,
                                     check=False).returncode)


def _square(x: int) -> int:
    return x * x


def way_pool() -> str:
    """multiprocessing.Pool with its default start method (fork on CPython 3.13)."""
    with multiprocessing.Pool(2) as pool:
        # apply_async, not map_async: map's chunk size divides by the number of
        # workers, which is 0 (ZeroDivisionError) once the pool has reaped dead ones.
        result = pool.apply_async(_square, (3,))
        try:
            got = result.get(TIMEOUT)
        except multiprocessing.TimeoutError:
            return f"hang (no result in {TIMEOUT:g} s)"
    return "ok" if got == 9 else f"wrong result {got}"


WAYS: dict[str, Callable[[], str]] = {
    "subprocess": way_subprocess,
    "os.fork running Python": way_fork_python,
    "preexec_fn": way_preexec_fn,
    "multiprocessing Pool": way_pool,
}


def run_way(way: Callable[[], str]) -> str:
    """The way's outcome; rdmaspawn's guard refusing a fork() (a Python exception the
    job can handle, instead of a dead child) is "refused (ForkHazardError)"."""
    try:
        return way()
    except Exception as e:  # what went wrong is the outcome
        if type(e).__name__ == "ForkHazardError":
            return "refused (ForkHazardError)"
        return f"{type(e).__name__}: {e}"


def survived(outcome: str) -> bool:
    """No child died and nothing hung: the child ran, or the guard refused the fork()."""
    return outcome == "ok" or outcome == "refused (ForkHazardError)"


def main() -> int:
    from rdmaspawn.testing.hazard import plant

    hazard = plant("verbs")
    ways = {name: run_way(way) for name, way in WAYS.items()}
    print(json.dumps({
        "rank": int(os.environ.get("SLURM_PROCID", "-1")),
        "node": os.environ.get("SLURMD_NODENAME", "?"),
        "rdmaspawn": os.environ.get("RDMASPAWN"),
        "hazard": hazard.method,
        "ways": ways,
    }), flush=True)
    # A Pool whose workers died leaves threads behind: do not wait for them.
    os._exit(0 if all(survived(v) for v in ways.values()) else 1)


if __name__ == "__main__":
    sys.exit(main())
