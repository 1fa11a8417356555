"""One rank of the training job that tests/test_torch_job.py launches with torchrun.

The rank plants the real DONTFORK hazard (``rdmaspawn.testing.hazard.plant``,
what ``ibv_reg_mr()`` leaves behind), joins the gloo group, all-reduces, then
starts children every way a training job does, with each API's defaults.
Nothing here mentions rdmaspawn's patch: whether the children survive depends
only on how the job was launched (``rdmaspawn run`` or not).

It writes one JSON object per line to ``$RDMASPAWN_TORCH_OUT/rank-<RANK>.jsonl``
as it goes (so a hang still leaves what came before):

- ``{"event": "start", ...}``: rank, world size, node, pid, the hazard planted,
  whether the parent (torchrun's agent) holds DONTFORK memory and its
  command line, whether rdmaspawn's patch is in force, multiprocessing's
  start method;
  every record also has ``t``, seconds since the rank started;
- ``{"event": "allreduce", "sum": ...}``;
- ``{"event": "way", "way": NAME, "outcome": "ok" | what went wrong,
  "raised_while_handling": [...], "hazard_live": bool}`` for each way,
  ``raised_while_handling`` listing the exceptions (newest first) that the
  failing one was raised while handling (see run_way), ``hazard_live``
  saying the planted page was still MADV_DONTFORK when the child was started;
- ``{"event": "done"}`` after the last collective.

Every way that can wait forever is bounded (``RDMASPAWN_TORCH_WAY_TIMEOUT``
seconds, default 20): without help, ``multiprocessing.Pool``'s default (fork)
workers die and the pool waits for them forever (a fork Pool's wait ends at
its first worker dead of a signal). The DataLoader keeps its
default (no timeout): it notices dead workers itself.
``RDMASPAWN_TORCH_WAYS`` (comma separated) runs only the named ways.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable

import rank_work as work

TIMEOUT = float(os.environ.get("RDMASPAWN_TORCH_WAY_TIMEOUT", "20"))


def describe_status(code: int) -> str:
    """A returncode in words: 'ok' for 0, else 'exit N' or 'signal SIGSEGV'."""
    if code == 0:
        return "ok"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit {code}"


def way_subprocess_ids() -> str:
    """subprocess with user= and extra_groups= (CPython 3.11 forks for these, not vfork)."""
    if os.geteuid() == 0:
        user, groups = 65534, [65534]  # nobody; the child must really switch
    else:
        user, groups = os.getuid(), None  # setgroups() needs CAP_SETGID
    res = subprocess.run(["sh", "-c", "id -u; id -G"], user=user, extra_groups=groups,
                         capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if res.returncode != 0:
        return f"{describe_status(res.returncode)} {res.stderr.strip()}".strip()
    uid, _, gids = res.stdout.strip().partition("\n")
    want_groups = {str(g) for g in groups or ()}
    if uid != str(user) or not want_groups <= set(gids.split()):
        return f"wrong ids: {res.stdout!r}"
    return "ok"


def way_spawnvp() -> str:
    return describe_status(os.spawnvp(os.P_WAIT, "true", ["true"]))


def way_popen() -> str:
    with os.popen("echo popen") as pipe:
        out = pipe.read()
    return "ok" if out == "popen\n" else f"read {out!r}"


def way_asyncio() -> str:
    async def main() -> tuple[bytes, int | None]:
        proc = await asyncio.create_subprocess_exec(
            "echo", "aio", stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        return out, proc.returncode

    out, code = asyncio.run(main())
    return describe_status(code or 0) if out == b"aio\n" else f"read {out!r}"


def _pool_squares(pool: multiprocessing.pool.Pool) -> str:
    result = pool.map_async(work.square, range(6))
    deadline = time.monotonic() + TIMEOUT
    # A fork Pool replaces a worker that dies with another fork that dies, for
    # ever: a wait that burns a CPU until TIMEOUT (about 10 CPU-s per rank in
    # the control).  The first worker found dead of a signal tells it at once
    # (only fork's: another start method's exitcode reads a pipe that the
    # Pool's own thread reads too).
    fork = pool._ctx.get_start_method() == "fork"  # type: ignore[attr-defined]
    while not result.ready():
        if fork:
            died = [w.exitcode for w in list(pool._pool)  # type: ignore[attr-defined]
                    if w.exitcode is not None and w.exitcode < 0]
            if died:
                return f"a worker died: {describe_status(died[0])}"
        if time.monotonic() > deadline:
            raise multiprocessing.TimeoutError
        result.wait(0.05)
    got = result.get()
    return "ok" if got == [x * x for x in range(6)] else f"got {got!r}"


def way_mp_spawn() -> str:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return _pool_squares(pool)


def way_mp_forkserver() -> str:
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        return _pool_squares(pool)


def way_torch_mp_spawn() -> str:
    import torch.multiprocessing

    with tempfile.TemporaryDirectory() as tmp:
        proof = os.path.join(tmp, "child")
        torch.multiprocessing.spawn(work.write_pid, args=(proof,), nprocs=1, join=True)
        return "ok" if os.path.exists(f"{proof}.0") else "the child left no proof"


def way_dataloader() -> str:
    from torch.utils.data import DataLoader

    loader = DataLoader(work.Squares(8), batch_size=4, num_workers=2)
    got = sorted(int(x) for batch in loader for x in batch)
    return "ok" if got == [x * x for x in range(8)] else f"got {got!r}"


def way_pool_default() -> str:
    with multiprocessing.Pool(2) as pool:
        return _pool_squares(pool)


def way_process_pool_default() -> str:
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        got = list(ex.map(work.square, range(6), timeout=TIMEOUT))
    return "ok" if got == [x * x for x in range(6)] else f"got {got!r}"


# In this order: the ways that crash without help come last, so that in a
# run without rdmaspawn the others still start from a clean rank. The
# DataLoader is last of all: until its failed iterator is collected, torch's
# SIGCHLD handler still watches the dead workers and would raise their
# death again, out of any later wait, at the next child's exit.
WAYS: dict[str, Callable[[], str]] = {
    "os.popen": way_popen,
    "asyncio": way_asyncio,
    "mp spawn": way_mp_spawn,
    "mp forkserver": way_mp_forkserver,
    "torch.mp.spawn": way_torch_mp_spawn,
    "subprocess user/extra_groups": way_subprocess_ids,
    "os.spawnvp": way_spawnvp,
    "Pool default": way_pool_default,
    "ProcessPoolExecutor default": way_process_pool_default,
    "DataLoader default": way_dataloader,
}


def describe(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:200]


def run_way(func: Callable[[], str]) -> tuple[str, list[str]]:
    """The way's outcome, and the exceptions the failing one was raised while handling.

    The second part is there because torch raises a dead worker's error out of
    its SIGCHLD handler, in the main thread, wherever that thread is. When it
    lands inside the except clause of CPython's ``Thread.start()`` (a queue
    starting its feeder thread), that clause's ``del _limbo[self]`` fails, and
    the way ends in ``KeyError: <Thread(QueueFeederThread, ...)>`` with the
    worker's death as its ``__context__``.
    """
    try:
        return func(), []
    except multiprocessing.TimeoutError:
        return "timeout", []
    except Exception as exc:  # the outcome is the report
        handled = []
        seen = exc.__context__
        while seen is not None and len(handled) < 5:
            handled.append(describe(seen))
            seen = seen.__context__
        return describe(exc), handled
    finally:
        gc.collect()  # what a failed way left in cycles (a DataLoader iterator) goes now


def main() -> None:
    started = time.monotonic()
    from rdmaspawn._host.processinfo import read_cmdline
    from rdmaspawn._host.procfs import has_dontfork, is_dontfork
    from rdmaspawn.testing.hazard import plant

    # First, before torch starts its threads: plant() needs a fresh malloc arena.
    hazard = plant(os.environ.get("RDMASPAWN_TORCH_HAZARD", "auto"))

    import torch
    import torch.distributed as dist

    import rdmaspawn

    rank = int(os.environ["RANK"])
    out_path = os.path.join(os.environ["RDMASPAWN_TORCH_OUT"], f"rank-{rank}.jsonl")
    out = open(out_path, "w")  # noqa: SIM115 - written line by line to the end

    def emit(**record: object) -> None:
        record["t"] = round(time.monotonic() - started, 2)
        out.write(json.dumps(record) + "\n")
        out.flush()

    emit(event="start", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
         local_rank=int(os.environ["LOCAL_RANK"]), node=int(os.environ["GROUP_RANK"]),
         pid=os.getpid(), cmdline=read_cmdline(os.getpid()),
         hazard=hazard.method, arena=hazard.arena,
         agent_dontfork=has_dontfork(os.getppid()), agent_cmdline=read_cmdline(os.getppid()),
         patched=rdmaspawn.is_patched(),
         start_method=multiprocessing.get_start_method(allow_none=True),
         default_context=multiprocessing.get_context().get_start_method())

    dist.init_process_group("gloo")
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    emit(event="allreduce", sum=t.item())

    wanted = os.environ.get("RDMASPAWN_TORCH_WAYS")
    names = wanted.split(",") if wanted else list(WAYS)
    for name in names:
        live = is_dontfork(hazard.arena)
        outcome, handled = run_way(WAYS[name])
        emit(event="way", way=name, outcome=outcome, raised_while_handling=handled,
             hazard_live=live)

    dist.barrier()
    # Before exit, or a gloo worker thread may free the last work's tensors
    # during interpreter shutdown: it must take the GIL for that, CPython
    # ends the thread, and the rank dies of std::terminate ("terminate called
    # without an active exception"), with or without rdmaspawn: see
    # measure_exit_aborts.py and pytorch/pytorch#190489.
    dist.destroy_process_group()
    emit(event="done")
    out.close()


if __name__ == "__main__":
    sys.exit(main())
