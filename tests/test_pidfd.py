"""Popen.pidfd: opened when first needed, used for signals and timed waits,
closed when the child is reaped or the Popen goes, never inherited."""
from __future__ import annotations

import errno
import gc
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import rdmaspawn
from rdmaspawn.dropin import pidfd


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _is_pidfd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"
    except FileNotFoundError:
        return False


def _pidfds() -> set[int]:
    """The pidfds open now (listdir's own fd may take a closed pidfd's number)."""
    return {fd for fd in _open_fds() if _is_pidfd(fd)}


@pytest.mark.parametrize("path", ["fork_exec", "posix_spawn"])
def test_popen_has_a_pidfd_closed_when_reaped(monkeypatch: pytest.MonkeyPatch,
                                              path: str) -> None:
    """Both spawn paths keep a pidfd; wait() closes it. CPython takes the
    posix_spawn shortcut only for an executable with a directory part (and
    before 3.13 only with close_fds=False); a bare name goes to fork_exec."""
    sleep = shutil.which("sleep")
    assert sleep is not None
    argv, close_fds = ([sleep, "30"], False) if path == "posix_spawn" else (["sleep", "30"], True)
    taken = []
    shortcut = rdmaspawn.Popen._posix_spawn

    def spy(self: object, *args: object) -> None:
        taken.append("posix_spawn")
        shortcut(self, *args)

    monkeypatch.setattr(rdmaspawn.Popen, "_posix_spawn", spy)
    proc = rdmaspawn.Popen(argv, close_fds=close_fds)
    assert (taken or ["fork_exec"]) == [path]
    assert proc.pidfd is not None and _is_pidfd(proc.pidfd)
    fd = proc.pidfd
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    assert proc.pidfd is None and fd not in _pidfds()


@pytest.mark.parametrize("first", [True, False], ids=["first-pidfd", "later"])
def test_opened_by_another_thread_during_wait_is_closed(
        monkeypatch: pytest.MonkeyPatch, first: bool) -> None:
    """A pidfd that another thread opens while wait() blocks (send_signal(),
    say) is closed when that wait() reaps the child: also where it is this
    process's first (Popen._wait then took the path that looks for none)."""
    monkeypatch.setattr(pidfd, "any_opened", not first)
    proc = rdmaspawn.Popen(["sleep", "30"])
    opened = []

    def opener() -> None:
        time.sleep(0.3)  # wait() blocks by now
        opened.append(proc.pidfd)
        proc.terminate()

    thread = threading.Thread(target=opener)
    thread.start()
    assert proc.wait() == -signal.SIGTERM
    thread.join()
    assert opened[0] is not None
    assert proc.pidfd is None
    assert opened[0] not in _pidfds()


def test_closed_when_poll_finds_the_child_exited() -> None:
    """poll() reaps too: the pidfd goes with the child."""
    proc = rdmaspawn.Popen(["true"])
    fd = proc.pidfd
    assert fd is not None
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.returncode == 0
    assert proc.pidfd is None and fd not in _pidfds()


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
    """If someone else reaps the child (os.waitpid behind Popen's back) after
    the pidfd was opened, the pidfd still names that dead process:
    signalling through it fails with ESRCH instead of reaching whatever took
    the pid."""
    proc = rdmaspawn.Popen(["true"])
    assert proc.pidfd is not None
    os.waitpid(proc.pid, 0)
    with pytest.raises(ProcessLookupError):
        signal.pidfd_send_signal(proc.pidfd, 0)
    proc.send_signal(signal.SIGTERM)   # no exception, no stray signal
    proc.wait()
    assert proc.pidfd is None


def test_opened_only_when_asked_for() -> None:
    """A Popen that is only waited for never opens a pidfd (issue 29: the
    kernel's part of one cost every spawn more than the rest of rdmaspawn's
    own work); asking for it opens one, once."""
    opened: list[int] = []
    real = os.pidfd_open

    def counting(pid: int, flags: int = 0) -> int:
        opened.append(pid)
        return real(pid, flags)

    os.pidfd_open = counting  # type: ignore[assignment]
    try:
        rdmaspawn.Popen(["true"]).wait()
        rdmaspawn.run(["true"])
        assert opened == []
        proc = rdmaspawn.Popen(["sleep", "30"])
        assert proc.pidfd is not None and proc.pidfd == proc.pidfd
        proc.kill()
        proc.wait()
        assert opened == [proc.pid]
    finally:
        os.pidfd_open = real  # type: ignore[assignment]


@pytest.mark.parametrize("err", [errno.ENOSYS, errno.EMFILE])
def test_without_pidfd_open_signals_as_cpython(monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    """Where pidfd_open() fails other than for a gone child (a kernel before
    5.3, the fd limit), ``pidfd`` is None and send_signal() does what
    CPython's does (os.kill after poll): it must not be lost."""
    def failing(pid: int, flags: int = 0) -> int:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "pidfd_open", failing)
    proc = rdmaspawn.Popen(["sleep", "30"])
    assert proc.pidfd is None
    proc.terminate()
    assert proc.wait(timeout=60) == -signal.SIGTERM
    proc = rdmaspawn.Popen(["sleep", "30"])
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)   # CPython's polling wait, with no pidfd
    proc.kill()
    assert proc.wait() == -signal.SIGKILL


# Run in a pid namespace of its own, under a shell as its init (orphans go to
# the shell, not to this script): there ns_last_pid picks the next pid, and
# nothing else takes it first.
_STRANGER = r"""
import os, signal, subprocess, sys, rdmaspawn
for _ in range(2):                      # pids used and freed: proc's pid - 1 is free
    subprocess.run(["true"])
proc = rdmaspawn.Popen(["true"])
os.waitpid(proc.pid, 0)                 # reaped behind Popen's back
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(proc.pid - 2))
# sh takes pid - 1; its background sleep, not our child, takes the pid.
out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                     capture_output=True, text=True)
stranger = int(out.stdout)
assert stranger == proc.pid, (stranger, proc.pid)
assert os.path.exists(f"/proc/{stranger}")
fd = proc.pidfd                         # must not name the stranger
proc.send_signal(signal.SIGTERM)        # must not reach it
state = open(f"/proc/{stranger}/stat").read().split(")")[1].split()[0]
os.kill(stranger, signal.SIGKILL)
print(fd, proc.returncode, state)
"""


def test_pid_taken_by_a_stranger_gets_no_pidfd() -> None:
    """The pidfd is opened from the pid; once someone else has reaped the
    child and the kernel has given its pid to a process that is not this
    process's child, ``pidfd`` is None (pidfd_open() would name the
    stranger) and send_signal() reaches nobody."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a pid namespace of its own")
    res = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", '"$0" -c "$1"; exit $?',
         sys.executable, _STRANGER], capture_output=True, text=True, timeout=120)
    if res.returncode != 0 and "unshare" in res.stderr:
        pytest.skip(f"cannot make a pid namespace here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    fd, returncode, state = res.stdout.split()
    assert fd == "None"
    assert returncode == "0"       # poll() found the child gone, as CPython's does
    assert state in ("S", "R")     # the stranger lives on


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
    """A Popen that is dropped unwaited closes its pidfd as it goes: at once
    where its child has exited (CPython's __del__ reaps it), once a later
    Popen() has reaped it where it still ran (CPython keeps that Popen until
    then); the context manager closes it through wait()."""
    proc = rdmaspawn.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                           stdin=subprocess.PIPE)
    fd = proc.pidfd
    assert fd is not None
    proc.stdin.close()                   # the child exits, unreaped
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    del proc
    gc.collect()
    assert fd not in _pidfds()

    proc = rdmaspawn.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                           stdin=subprocess.PIPE)
    fd, stdin, pid = proc.pidfd, proc.stdin, proc.pid
    assert fd is not None
    del proc
    gc.collect()
    assert fd in _pidfds()               # kept by CPython for a later reap
    stdin.close()
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    rdmaspawn.run(["true"])              # its _cleanup() reaps the dropped one
    gc.collect()
    assert fd not in _pidfds()

    with rdmaspawn.Popen(["true"]) as proc:
        fd = proc.pidfd
    assert proc.pidfd is None and fd not in _pidfds()


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
