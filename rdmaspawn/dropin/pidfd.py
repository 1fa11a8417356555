"""``Popen.pidfd``: signal and wait through a pidfd, never through a stale pid.

CPython's ``send_signal`` polls, then ``os.kill(self.pid)``: a reap in
between lets the signal hit whoever got the pid; a pidfd fails with ESRCH.
Opened when first needed (one per spawn would cost kernel work), and kept
only where ``waitid(P_PIDFD, WNOWAIT)`` finds a child of this process (one
reaped behind Popen's back, by ``os.wait()`` or SIGCHLD ignored, may have
given its pid to a stranger, which gets no pidfd and no signal); closed
at the reap under a lock, so a concurrent ``send_signal`` never uses a reused
fd number. Without ``pidfd_open``, Popen does as CPython's.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time

from .._native import capi as _capi

__all__ = ["PidfdMixin"]

#: Serialises opening, using and closing every Popen's pidfd (all rare).
_LOCK = threading.Lock()

#: Whether any Popen has kept a pidfd yet (set under _LOCK, never cleared):
#: until then rdmaspawn.Popen's ``_wait`` skips looking for one.
any_opened = False

#: The longest one poll() may sleep: its timeout is an int of milliseconds.
#: A longer wait (CPython takes any float: 1e300, inf, nan) polls again.
_POLL_MAX_MS = 2**31 - 1


def _poll_ms(remaining: float) -> float:
    """poll()'s timeout for ``remaining`` seconds: 0 for none left, capped."""
    if remaining <= 0:
        return 0
    if not remaining * 1000 < _POLL_MAX_MS:  # also inf and nan
        return _POLL_MAX_MS
    return remaining * 1000


def _is_our_child(fd: int) -> bool:
    """Whether the process ``fd`` names is a child of this process (alive, or
    exited and not yet reaped): it is left as it is (WNOWAIT)."""
    try:
        os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except OSError:  # pragma: no cover - Linux 5.3 has pidfd_open, not P_PIDFD
        return True
    return True


class _Pidfd:
    """An open pidfd, closed by :meth:`close` or with the Popen that holds it:
    no ``__del__`` on Popen, which every Popen would pay for."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            _capi.close_fd(fd)  # keeps the GIL: a pidfd's close never blocks

    __del__ = close


class PidfdMixin:
    """For a ``subprocess.Popen`` subclass."""

    #: The open pidfd, or None: none opened yet, or closed at the reap.
    _pidfd: _Pidfd | None = None
    #: Whether opening one failed other than by the child being gone: then
    #: Popen signals as CPython's does.
    _pidfd_unavailable = False

    @property
    def pidfd(self) -> int | None:
        """The child's pidfd, opened on first use; None once the child is
        reaped, where someone else reaped it, or where the kernel gives none."""
        held = self._pidfd if self._pidfd is not None else self._open_pidfd()
        return held.fd if held is not None else None

    def _open_pidfd(self) -> _Pidfd | None:
        with _LOCK:
            if self._pidfd is not None or self.returncode is not None:  # type: ignore[attr-defined]
                return self._pidfd
            try:
                fd = os.pidfd_open(self.pid)  # type: ignore[attr-defined]
            except ProcessLookupError:
                return None  # reaped elsewhere, and the pid is free
            except (OSError, AttributeError):
                self._pidfd_unavailable = True
                return None
            held = _Pidfd(fd)
            if not _is_our_child(fd):
                held.close()  # reaped elsewhere, and the pid is a stranger's
                return None
            global any_opened
            any_opened = True
            self._pidfd = held
            if self.returncode is not None:  # type: ignore[attr-defined]
                # Reaped by this Popen meanwhile, whose close may have seen
                # no pidfd yet: each of the two sees the other's write.
                self._close_pidfd_locked()
            return self._pidfd

    def _close_pidfd(self) -> None:
        if self._pidfd is None:  # the usual case: none was ever opened
            return
        with _LOCK:
            self._close_pidfd_locked()

    def _close_pidfd_locked(self) -> None:
        held, self._pidfd = self._pidfd, None
        if held is not None:
            held.close()

    # Closed after a reap by wait() or poll() (not in _handle_exitstatus: one
    # call fewer on every Popen's way); _cleanup() drops the Popen with it.
    def poll(self) -> int | None:
        returncode: int | None = super().poll()  # type: ignore[misc]
        if returncode is not None and self._pidfd is not None:
            self._close_pidfd()
        return returncode

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is not None:  # type: ignore[attr-defined]
            return  # as CPython: an exited child is not signalled
        if self.pidfd is None:
            if self._pidfd_unavailable:
                super().send_signal(sig)  # type: ignore[misc]
            return  # reaped meanwhile, here or elsewhere: nothing to signal
        with _LOCK:
            if self._pidfd is None:  # reaped meanwhile
                return
            try:
                signal.pidfd_send_signal(self._pidfd.fd, sig)
            except ProcessLookupError:
                pass

    def _wait(self, timeout: float | None) -> int | None:
        if timeout is None or self.returncode is not None:  # type: ignore[attr-defined]
            returncode: int | None = super()._wait(timeout)  # type: ignore[misc]
        else:
            returncode = self._wait_on_pidfd(timeout)
        if returncode is not None and self._pidfd is not None:
            self._close_pidfd()
        return returncode

    def _wait_on_pidfd(self, timeout: float) -> int | None:
        """Sleep until the pidfd says the child exited, instead of CPython's
        polling loop; then CPython's own code reaps it."""
        endtime = time.monotonic() + timeout
        if self._pidfd is None:
            self._open_pidfd()
        with _LOCK:
            try:
                fd = -1 if self._pidfd is None else os.dup(self._pidfd.fd)
            except OSError:  # EMFILE: CPython's loop needs no fd
                fd = -1
        if fd >= 0:
            try:
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                while not poller.poll(_poll_ms(endtime - time.monotonic())):
                    if endtime - time.monotonic() <= 0:
                        raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[attr-defined]
            finally:
                os.close(fd)
        return super()._wait(max(endtime - time.monotonic(), 0))  # type: ignore[misc, no-any-return]
