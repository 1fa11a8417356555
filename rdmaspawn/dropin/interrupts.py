"""Hold SIGINT's Python handler back while ``rdmaspawn.Popen`` starts a child.

A KeyboardInterrupt can be raised at almost any bytecode of the main thread.
Raised between the engine's return and ``self.pid = ...``, it loses the pid:
a child nobody can reap; raised between ``_get_handles()`` and the wrapping
of the pipes in file objects, it loses fds. (CPython's own Popen has the
same windows; rdmaspawn's is wider: the calling thread waits in the engine
until the child has exec'd, and a SIGINT that arrives meanwhile runs its
handler just after.)

So while a Popen is being built, SIGINT's handler only counts. When the
Popen is complete the real handler runs once for what arrived (POSIX merges
pending signals the same way); if it raises, the caller never gets the Popen,
so its child is killed and reaped and its pipes closed (``Popen._discard``)
before the exception goes on. Only the main thread runs signal handlers, and
only a Python-level handler can raise: elsewhere nothing is held.

Not covered: other signals whose Python handler raises (a SIGALRM timeout,
a SIGTERM handler raising SystemExit).
"""
from __future__ import annotations

import _signal  # signal's C half: the same calls without the enum conversions
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable

__all__ = ["Held", "hold"]

# On the hot path (every Popen in the main thread): a plain int, no enum.
_SIGINT = int(signal.SIGINT)


class Held:
    """SIGINT held back in the main thread until :meth:`release`."""

    def __init__(self, handler: Callable[[int, FrameType | None], Any]) -> None:
        self.handler = handler
        self.arrived = 0
        self.handled = 0

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.arrived += 1

    def replay(self) -> None:
        """Run the real handler, once, for the SIGINTs that arrived so far
        (more keep waiting). It may raise: that is the point."""
        if self.arrived > self.handled:
            self.handled = self.arrived
            self.handler(signal.SIGINT, sys._getframe(1))

    def release(self) -> None:
        """Give SIGINT its handler back; one that arrived after the last
        :meth:`replay` is raised again, for that handler."""
        _signal.signal(_SIGINT, self.handler)
        if self.arrived > self.handled:
            _signal.raise_signal(_SIGINT)


def hold() -> Held | None:
    """Start holding SIGINT back, or None where its handler cannot run here."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = _signal.getsignal(_SIGINT)
    if not callable(handler):
        return None  # SIG_IGN, SIG_DFL, or not installed from Python
    held = Held(handler)
    try:
        _signal.signal(_SIGINT, held._record)
    except ValueError:  # a subinterpreter: no signal handlers of its own
        return None
    return held
