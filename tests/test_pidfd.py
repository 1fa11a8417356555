"""Popen.pidfd: kept from the spawn, used for signals and timed waits, closed
when the child is reaped or the Popen goes, never inherited."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time

import pytest

import rdmaspawn


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _is_pidfd(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"


@pytest.mark.parametrize("close_fds", [True, False])
def test_popen_has_a_pidfd_closed_when_reaped(close_fds: bool) -> None:
    """Both spawn paths (fork_exec, and the posix_spawn shortcut taken with
    close_fds=False) keep a pidfd; wait() closes it."""
    proc = rdmaspawn.Popen(["sleep", "30"], close_fds=close_fds)
    assert proc.pidfd is not None and _is_pidfd(proc.pidfd)
    fd = proc.pidfd
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    assert proc.pidfd is None and fd not in _open_fds()


def test_pidfd_is_not_inherited() -> None:
    """The pidfd is O_CLOEXEC: a child started with close_fds=False (which
    keeps every inheritable fd) does not get it."""
    holder = rdmaspawn.Popen(["sleep", "30"])
    try:
        assert holder.pidfd is not None
        assert not os.get_inheritable(holder.pidfd)
        out = rdmaspawn.run(["ls", "/proc/self/fd"], close_fds=False,
                            stdout=subprocess.PIPE, text=True).stdout.split()
        assert str(holder.pidfd) not in out
        # Control: an inheritable fd at the same kind of place is inherited.
        r, w = os.pipe()
        os.set_inheritable(r, True)
        try:
            out = rdmaspawn.run(["ls", "/proc/self/fd"], close_fds=False,
                                stdout=subprocess.PIPE, text=True).stdout.split()
            assert str(r) in out
        finally:
            os.close(r)
            os.close(w)
    finally:
        holder.kill()
        holder.wait()


def test_send_signal_goes_through_the_pidfd(monkeypatch: pytest.MonkeyPatch) -> None:
    """terminate()/kill()/send_signal() use pidfd_send_signal, never
    os.kill(pid), so a recycled pid cannot be hit."""
    killed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(pid))
    proc = rdmaspawn.Popen(["sleep", "30"])
    proc.terminate()
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert killed == []
    proc.send_signal(signal.SIGKILL)   # reaped: nothing to signal, no error
    assert killed == []


def test_reaped_elsewhere_is_never_signalled() -> None:
    """If someone else reaps the child (os.waitpid behind Popen's back), the
    pidfd still names that dead process: signalling through it fails with
    ESRCH instead of reaching whatever took the pid."""
    proc = rdmaspawn.Popen(["true"])
    os.waitpid(proc.pid, 0)
    assert proc.pidfd is not None
    with pytest.raises(ProcessLookupError):
        signal.pidfd_send_signal(proc.pidfd, 0)
    proc.send_signal(signal.SIGTERM)   # no exception, no stray signal
    proc.wait()
    assert proc.pidfd is None


def test_timed_wait_uses_the_pidfd() -> None:
    """wait(timeout) times out as CPython's does, and returns as soon as the
    child exits (woken by the pidfd, not a sleep loop)."""
    proc = rdmaspawn.Popen(["sleep", "30"])
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    assert time.monotonic() - start >= 0.2
    assert proc.pidfd is not None
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert proc.pidfd is None
    quick = rdmaspawn.Popen([sys.executable, "-c", "pass"])
    assert quick.wait(timeout=30) == 0


def test_closed_with_the_popen() -> None:
    """A Popen that is dropped unwaited closes its pidfd (__del__); the
    context manager closes it through wait()."""
    proc = rdmaspawn.Popen(["true"])
    fd = proc.pidfd
    assert fd is not None
    del proc
    gc.collect()
    assert fd not in _open_fds() or not _is_pidfd(fd)
    with rdmaspawn.Popen(["true"]) as proc:
        fd = proc.pidfd
    assert proc.pidfd is None and fd not in _open_fds()


def test_no_fd_left_after_many() -> None:
    """A hundred spawns, waited or killed, leave no fd behind."""
    before = _open_fds()
    for i in range(100):
        proc = rdmaspawn.Popen(["true"] if i % 2 else ["sleep", "30"])
        if i % 2 == 0:
            proc.kill()
        proc.wait()
    assert _open_fds() == before


def test_stock_popen_under_patch_gets_no_pidfd() -> None:
    """Only rdmaspawn.Popen asks for one: subprocess.Popen under patch() is
    left exactly as it was (no attribute, no fd)."""
    before = _open_fds()
    with rdmaspawn.patched():
        proc = subprocess.Popen(["true"])
        proc.wait()
    assert not hasattr(proc, "pidfd")
    assert _open_fds() == before


@pytest.mark.parametrize("timeout", [2147484.0, 1e300, float("inf"), float("nan")])
def test_every_timeout_cpython_takes_waits(timeout: float) -> None:
    """A timeout too large for one poll() (over INT_MAX ms, inf; nan, which
    CPython also takes) waits for the child, as CPython's wait() does, in
    wait() and in run(); it raised OverflowError, and run() killed the child."""
    proc = rdmaspawn.Popen(["sleep", "0.2"])
    assert proc.pidfd is not None  # the pidfd wait is what is tried
    if timeout != timeout and sys.version_info >= (3, 15):
        # 3.15's wait() refuses nan with a ValueError: so does rdmaspawn's, and run().
        stock = subprocess.Popen(["true"])
        for popen in (stock, proc):
            with pytest.raises(ValueError, match="NaN"):
                popen.wait(timeout=timeout)
            assert popen.wait() == 0
        with pytest.raises(ValueError, match="NaN"):
            rdmaspawn.run(["true"], timeout=timeout)
        return
    assert proc.wait(timeout=timeout) == 0
    assert rdmaspawn.run(["sh", "-c", "sleep 0.2; exit 4"], timeout=timeout).returncode == 4
