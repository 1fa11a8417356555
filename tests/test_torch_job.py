"""A real training job under the real DONTFORK hazard: torchrun, gloo, and children.

Each rank (tests/torch_job/rank.py) plants the hazard, all-reduces over gloo,
then starts children every way a training job does, each API with its
defaults, and reports each outcome as a JSON line (see the rank's docstring).
The tests launch it with torchrun:

- without rdmaspawn: the children that fork die (SIGSEGV, a DataLoader
  error, a BrokenProcessPool, a Pool that waits forever): the hazard is real;
- under ``rdmaspawn run``: every child of every rank finishes, on one node
  and on two (two torchrun agents meeting at a c10d rendezvous), and with
  ``torchrun --start-method fork``;
- under ``rdmaspawn run --start-method keep`` (multiprocessing's fork default
  kept): what must fork raises ForkHazardError at once instead.

torch is installed in CI on CPython 3.11 only (a CPU wheel there; elsewhere
pip would fetch multi-GB CUDA builds). Where it is missing these tests skip,
or fail under RDMASPAWN_REQUIRE_TORCH=1.

The rank's files live in tests/torch_job/, not tests/torch/: pytest puts
tests/ on sys.path, and where torch is not installed a directory named
``torch`` there would import as an (empty) namespace package called torch.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
from typing import Any, Callable

import pytest
from helpers.hazard import require_torch

RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_job", "rank.py")

# What each way gives in a rank that holds the hazard, without rdmaspawn, on
# CPython 3.11 (where subprocess uses vfork unless it must change ids): a
# regular expression the outcome must match in full.
WITHOUT_RDMASPAWN = {
    "os.popen": "ok",
    "asyncio": "ok",
    "mp spawn": "ok",
    "mp forkserver": "ok",
    "torch.mp.spawn": "ok",
    "subprocess user/extra_groups": "signal SIGSEGV",
    "os.spawnvp": "signal SIGSEGV",
    # Its workers die at start and the pool restarts them forever: the rank
    # stops waiting at the first worker it finds dead of a signal, or at its
    # timeout, unless CPython's own pool code trips over the dead workers
    # first (a ZeroDivisionError in its task handling).
    "Pool default": r"a worker died: signal SIGSEGV|timeout|ZeroDivisionError: .*",
    "ProcessPoolExecutor default": r"BrokenProcessPool: .*terminated abruptly.*",
    # Which message depends on who notices the dead worker first. It may
    # also come as the context of another exception (see _mismatches).
    "DataLoader default": r"RuntimeError: DataLoader worker \(pid(?:\(s\))? [\d, ]+\) "
                          r"(is killed by signal: Segmentation fault\.|exited unexpectedly)",
}
ALL_OK = {way: "ok" for way in WITHOUT_RDMASPAWN}
# The ways that need rdmaspawn: the ones a multi-rank test must cover.
FORKING_WAYS = [way for way, outcome in WITHOUT_RDMASPAWN.items() if outcome != "ok"]

# How long the job may take before the test kills it and fails.
JOB_TIMEOUT = 240


@pytest.fixture(scope="module")
def torchrun() -> str:
    require_torch()
    path = os.path.join(sysconfig.get_path("scripts"), "torchrun")
    assert os.access(path, os.X_OK), f"torch is installed but {path} is not"
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _under_rdmaspawn_run(cmd: list[str], *options: str) -> list[str]:
    return [os.path.join(sysconfig.get_path("scripts"), "rdmaspawn"), "run", *options, "--",
            *cmd]


def _run_agents(cmds: list[list[str]], out: str, ways: list[str] | None = None,
                way_timeout: float = 60) -> list[subprocess.CompletedProcess[str]]:
    """Start every agent command at once, wait for all; kill them all on a timeout."""
    env = dict(os.environ, RDMASPAWN_TORCH_OUT=out,
               RDMASPAWN_TORCH_WAY_TIMEOUT=str(way_timeout))
    if ways:
        env["RDMASPAWN_TORCH_WAYS"] = ",".join(ways)
    procs = [subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for cmd in cmds]
    results = []
    try:
        for proc in procs:
            output, _ = proc.communicate(timeout=JOB_TIMEOUT)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, output))
    finally:
        for proc in procs:
            if proc.poll() is None:  # a timeout: take the whole job down
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return results


def _reports(out: str) -> dict[int, list[dict[str, Any]]]:
    reports = {}
    for path in glob.glob(os.path.join(out, "rank-*.jsonl")):
        with open(path) as f:
            records = [json.loads(line) for line in f]
        reports[records[0]["rank"]] = records
    return reports


def _outcomes(records: list[dict[str, Any]]) -> dict[str, str]:
    return {r["way"]: r["outcome"] for r in records if r["event"] == "way"}


def _outcome_chains(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """way -> its outcome, then what it was raised while handling (newest first)."""
    return {r["way"]: [r["outcome"], *r["raised_while_handling"]]
            for r in records if r["event"] == "way"}


def _mismatches(records: list[dict[str, Any]], patterns: dict[str, str]) -> dict[str, Any]:
    """way -> (outcome chain, expected pattern) for every way that does not match.

    A way matches when its outcome, or an exception the outcome was raised
    while handling, matches the pattern in full: torch raises a dead
    DataLoader worker's error from a signal handler, wherever the main thread
    is, and the code it interrupts can turn it into another exception (see
    run_way in tests/torch_job/rank.py).
    """
    chains = _outcome_chains(records)
    return {way: (chains.get(way), patterns.get(way))
            for way in chains.keys() | patterns.keys()
            if way not in chains or way not in patterns
            or not any(re.fullmatch(patterns[way], link) for link in chains[way])}


def _check_job(results: list[subprocess.CompletedProcess[str]], out: str,
               world_size: int) -> dict[int, list[dict[str, Any]]]:
    """Every agent exited 0, every rank all-reduced and finished with the hazard live."""
    for res in results:
        assert res.returncode == 0, res.stdout[-6000:]
    reports = _reports(out)
    assert sorted(reports) == list(range(world_size))
    total = world_size * (world_size + 1) / 2  # each rank contributes rank + 1
    for rank, records in reports.items():
        events = [r["event"] for r in records]
        assert events[:2] == ["start", "allreduce"] and events[-1] == "done", (rank, events)
        assert records[1]["sum"] == total
        assert all(r["hazard_live"] for r in records if r["event"] == "way"), records
    return reports


def _load_rank_script() -> Any:
    """rank.py as a module (without torch: it imports torch where it uses it)."""
    spec = importlib.util.spec_from_file_location("rdmaspawn_test_rank", RANK_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(RANK_SCRIPT))  # for its rank_work
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.dirname(RANK_SCRIPT))
    return module


def test_a_worker_death_turned_into_another_error_still_counts():
    """CI saw the DataLoader way end in ``KeyError: <Thread(QueueFeederThread,
    ...)>``: torch's SIGCHLD handler raised the worker's death inside the
    except clause of CPython's Thread.start(), whose ``del _limbo[self]``
    failed in turn. The rank reports the chain; the control accepts the death
    found in it, and nothing else."""
    rank = _load_rank_script()
    death = "DataLoader worker (pid 4242) is killed by signal: Segmentation fault."

    def interrupted_thread_start() -> str:
        try:
            raise RuntimeError(death)
        except RuntimeError:
            # Chained implicitly, as in Thread.start's except clause.
            raise KeyError("<Thread(QueueFeederThread, started daemon 1)>")  # noqa: B904

    def alone() -> str:
        raise KeyError("<Thread(QueueFeederThread, started daemon 1)>")

    def record(func: Callable[[], str]) -> list[dict[str, Any]]:
        outcome, handled = rank.run_way(func)
        return [{"event": "way", "way": "DataLoader default", "outcome": outcome,
                 "raised_while_handling": handled}]

    pattern = {"DataLoader default": WITHOUT_RDMASPAWN["DataLoader default"]}
    chained = record(interrupted_thread_start)
    assert chained[0]["outcome"].startswith("KeyError: ")
    assert chained[0]["raised_while_handling"] == [f"RuntimeError: {death}"]
    assert _mismatches(chained, pattern) == {}
    assert set(_mismatches(record(alone), pattern)) == {"DataLoader default"}


def test_without_rdmaspawn_the_forking_children_crash(torchrun, tmp_path):
    """The control: a rank holding the hazard loses every child that fork()s
    (subprocess with user=/extra_groups=, os.spawnvp, DataLoader, Pool and
    ProcessPoolExecutor with their default fork start method) while the
    vfork/exec ones live; the Pool would wait forever without the rank's
    timeout."""
    out = str(tmp_path)
    results = _run_agents([[torchrun, "--standalone", "--nproc-per-node", "2", RANK_SCRIPT]],
                          out, way_timeout=10)
    for rank, records in _check_job(results, out, 2).items():
        start = records[0]
        assert (start["patched"], start["default_context"]) == (False, "fork")
        assert _mismatches(records, WITHOUT_RDMASPAWN) == {}, rank


def test_under_rdmaspawn_run_every_child_of_every_rank_finishes(torchrun, tmp_path):
    """``rdmaspawn run -- torchrun --nproc-per-node 2 rank.py``: the same job,
    unchanged, starts every child every way with the defaults, and finishes."""
    out = str(tmp_path)
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2", RANK_SCRIPT]
    results = _run_agents([_under_rdmaspawn_run(cmd)], out)
    for rank, records in _check_job(results, out, 2).items():
        start = records[0]
        assert (start["patched"], start["default_context"]) == (True, "forkserver")
        assert _outcomes(records) == ALL_OK, rank


def test_two_nodes_under_rdmaspawn_run(torchrun, tmp_path):
    """Two torchrun agents (--nnodes 2, c10d rendezvous on 127.0.0.1), two
    workers each, each agent under ``rdmaspawn run``: the job completes and
    every rank of both nodes starts its forking children under the hazard."""
    out = str(tmp_path)
    endpoint = f"127.0.0.1:{_free_port()}"
    cmd = [torchrun, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", endpoint, "--rdzv-id", "rdmaspawn-two-nodes", RANK_SCRIPT]
    results = _run_agents([_under_rdmaspawn_run(cmd)] * 2, out, ways=FORKING_WAYS)
    reports = _check_job(results, out, 4)
    assert sorted((r[0]["node"], r[0]["local_rank"]) for r in reports.values()) == [
        (0, 0), (0, 1), (1, 0), (1, 1)]
    for rank, records in reports.items():
        assert _outcomes(records) == {way: "ok" for way in FORKING_WAYS}, rank


def test_torchrun_start_method_fork(torchrun, tmp_path):
    """``torchrun --start-method fork`` with a script: torch ignores the start
    method for script entrypoints and starts each worker with
    subprocess.Popen (an exec'd interpreter, not a fork of the agent), and the
    agent itself holds no DONTFORK memory (only ranks plant it), so the agent
    has nothing to crash on; each rank's own children are protected by
    ``rdmaspawn run`` as with the default start method."""
    out = str(tmp_path)
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2", "--start-method", "fork",
           RANK_SCRIPT]
    results = _run_agents([_under_rdmaspawn_run(cmd)], out, ways=FORKING_WAYS)
    for rank, records in _check_job(results, out, 2).items():
        start = records[0]
        assert start["cmdline"][-1] == RANK_SCRIPT, start["cmdline"]  # exec'd, not forked
        assert any("torchrun" in arg for arg in start["agent_cmdline"]), start
        assert start["agent_dontfork"] is False
        assert _outcomes(records) == {way: "ok" for way in FORKING_WAYS}, rank


def test_run_keeping_the_fork_default_raises_instead_of_crashing(torchrun, tmp_path):
    """``rdmaspawn run --start-method keep``: multiprocessing keeps its fork
    default, so DataLoader, Pool and ProcessPoolExecutor must fork; guard
    turns each into a ForkHazardError in the rank (no SIGSEGV, no hang),
    while subprocess and os.spawn* still go through the engine."""
    out = str(tmp_path)
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2", RANK_SCRIPT]
    results = _run_agents([_under_rdmaspawn_run(cmd, "--start-method", "keep")], out,
                          ways=FORKING_WAYS)
    refused = r"ForkHazardError: os\.fork\(\) would fork\(\) a process that holds MADV_DONTFORK .*"
    expected = {"subprocess user/extra_groups": "ok", "os.spawnvp": "ok",
                "DataLoader default": refused, "Pool default": refused,
                "ProcessPoolExecutor default": refused}
    for rank, records in _check_job(results, out, 2).items():
        assert records[0]["default_context"] == "fork"
        assert _mismatches(records, expected) == {}, rank
