"""Nothing leaks: fds, zombies and memory after thousands of spawns.

Pipes, timeouts and failures are mixed in, through rdmaspawn.Popen, the
engine and the patched standard library.
"""
from __future__ import annotations

import subprocess

import pytest
from helpers.process_state import children, open_fds, rss_kib

import rdmaspawn

ROUNDS = 400  # x 5 spawns each = 2000 spawns


def _one_round(i: int) -> None:
    out = rdmaspawn.run(["/bin/echo", str(i)], capture_output=True, text=True)
    assert out.stdout == f"{i}\n"
    with pytest.raises(FileNotFoundError):
        rdmaspawn.Popen(["/nonexistent/prog"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with pytest.raises(FileNotFoundError):
        rdmaspawn.Popen(["/bin/true"], cwd="/nonexistent", stdin=subprocess.PIPE)
    with pytest.raises(rdmaspawn.SpawnError):
        rdmaspawn.spawn([b"x"], [b"/nonexistent"])
    with rdmaspawn.patched():
        assert subprocess.call(["/bin/true"], stdout=subprocess.DEVNULL) == 0
    if i % 40 == 0:
        with pytest.raises(subprocess.TimeoutExpired):
            rdmaspawn.run(["/bin/sleep", "10"], stdout=subprocess.PIPE, timeout=0.05)


def test_thousands_of_spawns_leak_nothing():
    """fds, children and RSS are back where they were after 2000+ spawns."""
    for i in range(20):  # warm caches, lazy imports and allocator pools
        _one_round(i)
    fds, kids, rss = open_fds(), children(), rss_kib()
    for i in range(ROUNDS):
        _one_round(i)
    assert open_fds() == fds
    assert children() == kids
    grown = rss_kib() - rss
    assert grown < 4096, f"RSS grew by {grown} KiB over {ROUNDS * 5} spawns"


def test_many_threads_at_once():
    """Spawning from many threads at once: every child right, nothing left over."""
    import threading

    fds, kids = open_fds(), children()
    errors = []

    def worker(n: int) -> None:
        try:
            for j in range(60):
                out = rdmaspawn.check_output(["/bin/echo", f"{n}-{j}"], text=True)
                assert out == f"{n}-{j}\n"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert open_fds() == fds
    assert children() == kids


def test_a_request_refused_beside_a_setup_leaks_nothing():
    """A bad argument beside a setup, and a setup that cannot be packed after
    its request was converted: no fd, child or memory left behind."""
    from rdmaspawn._child.model import build

    def refused() -> None:
        for argv in ([b"x", 3], [b"x", b"y" * 4096] * 40):
            with pytest.raises((TypeError, FileNotFoundError)):
                rdmaspawn.spawn(argv, [b"/bin/true"], setup=build(cgroup="/nonexistent/cg"))
        with pytest.raises(FileNotFoundError):
            rdmaspawn.Popen(["/bin/true"], env={"A": "b" * 4096}, cgroup="/nonexistent/cg")

    for _ in range(50):
        refused()
    fds, kids, rss = open_fds(), children(), rss_kib()
    for _ in range(2000):
        refused()
    assert open_fds() == fds
    assert children() == kids
    grown = rss_kib() - rss
    assert grown < 2048, f"RSS grew by {grown} KiB over 2000 rounds"
