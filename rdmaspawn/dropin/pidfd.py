"""``Popen.pidfd``: signal and wait through a pidfd, never through a stale pid.

CPython's ``send_signal`` polls, then ``os.kill(self.pid)``: if another
thread reaps the child in between, the pid can be recycled and the signal
hits a stranger (a documented race). A pidfd names the process itself:
after the child is reaped, ``pidfd_send_signal`` fails with ESRCH instead.

The engine asks the kernel for one (CLONE_PIDFD, Linux 5.2; O_CLOEXEC, so
no child inherits it); ``fork_exec``, which must return a bare pid, hands it
up through a per-thread hand-over in C (csrc/python/pidfd.c, reached as
``rdmaspawn._native.capi.request_pidfd`` / ``take_pidfd``). It is closed once the child is
reaped (under a lock, so that a concurrent ``send_signal`` never uses a
closed, reused fd number), and by ``__del__`` at the latest.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from typing import Any

from .._native import capi as _capi

__all__ = ["PidfdMixin"]

# Called on every Popen, bound once: the C hand-over and a close that keeps
# the GIL (a pidfd's close never blocks; see _native.capi), and a lock type.
_request_pidfd = _capi.request_pidfd
_take_pidfd = _capi.take_pidfd
_close_fd = _capi.close_fd
_Lock = threading.Lock


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


class PidfdMixin:
    """For a ``subprocess.Popen`` subclass with ``_cpython_execute_child``."""

    #: The child's pidfd, or None (no kernel support, or the child is reaped).
    pidfd: int | None = None
    _pidfd_lock: threading.Lock | None = None

    def _execute_child(self, *args: Any) -> None:
        _request_pidfd()
        try:
            self._cpython_execute_child(*args)  # type: ignore[attr-defined]
        except BaseException:
            fd = _take_pidfd()
            if fd >= 0:
                _close_fd(fd)
            raise
        fd = _take_pidfd()
        if fd >= 0:
            self._pidfd_lock = _Lock()
            self.pidfd = fd

    def _close_pidfd(self) -> None:
        lock = self._pidfd_lock
        if lock is None or self.pidfd is None:  # None is for good: no lock needed
            return
        with lock:
            if self.pidfd is not None:
                _close_fd(self.pidfd)
                self.pidfd = None

    # Reaped: by wait() and CPython's _cleanup() of dropped Popens (both
    # through _handle_exitstatus, ECHILD included), or by poll(), which sets
    # returncode itself when it finds the child reaped by someone else.
    def _handle_exitstatus(self, *args: Any, **kwargs: Any) -> None:
        super()._handle_exitstatus(*args, **kwargs)  # type: ignore[misc]
        if self.returncode is not None:  # type: ignore[attr-defined]
            self._close_pidfd()

    def poll(self) -> int | None:
        returncode: int | None = super().poll()  # type: ignore[misc]
        if returncode is not None:
            self._close_pidfd()
        return returncode

    def send_signal(self, sig: int) -> None:
        lock = self._pidfd_lock
        if lock is None:
            super().send_signal(sig)  # type: ignore[misc]
            return
        self.poll()
        with lock:
            if self.pidfd is None:  # reaped meanwhile
                return
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except ProcessLookupError:
                pass

    def _wait(self, timeout: float | None) -> int | None:
        lock = self._pidfd_lock
        if timeout is None or lock is None:
            return super()._wait(timeout)  # type: ignore[misc, no-any-return]
        # Sleep until the pidfd says the child exited, instead of CPython's
        # polling loop; then CPython's own code reaps it.
        endtime = time.monotonic() + timeout
        with lock:
            fd = -1 if self.pidfd is None else os.dup(self.pidfd)
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

    def __del__(self, *args: Any, **kwargs: Any) -> None:
        self._close_pidfd()
        super().__del__(*args, **kwargs)  # type: ignore[misc]
