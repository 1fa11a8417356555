"""Hold SIGINT back while ``rdmaspawn.Popen`` starts a child.

A KeyboardInterrupt can be raised at almost any bytecode of the main thread.
Raised between the engine's return and ``self.pid = ...``, it loses the pid:
a child nobody can reap; raised between ``_get_handles()`` and the wrapping
of the pipes in file objects, it loses fds. (CPython's own Popen has the
same windows; rdmaspawn's is wider: the calling thread waits in the engine
until the child has exec'd, and a SIGINT that arrives meanwhile runs its
handler just after.)

So while a Popen is being built, SIGINT only counts: the kernel's action is
swapped for a C handler that counts (csrc/python/sigint.c), a system call
each way. When the Popen is complete, the program's handler runs once for
what arrived (POSIX merges pending signals the same way), still under the
hold; if it raises, the caller never gets the Popen, so its child is killed
and reaped and its pipes closed (``Popen._discard``) before the hold ends
and the exception goes on: a second SIGINT cannot cut that short. The
release puts the program's action back and raises SIGINT again if more
arrived after that run. Only the main thread runs Python's signal
handlers, and only a handler installed from Python can raise: elsewhere
nothing is held.

Whether a hold is on is the C side's word (:func:`owner` reads it before
the caller's ``try``; :func:`release`, called on the way out of it whether
or not it raised, ends whatever hold is on), never a value handed back to
Python: an exception raised between the hold and the caller's receipt of
its result (a SIGINT that Python recorded just before the swap, handled
just after) cannot leave the hold on.

The hold leaves SIGINT as the program set it: Python's own table of
handlers is never touched (``signal.getsignal()`` is right throughout), the
kernel's action goes back whole (a C library's handler under Python's
included), and one the program sets meanwhile (``signal.signal()`` from
another signal's handler, or from code Popen() runs) stays. (Blocking
SIGINT instead would hold nothing in a process with other threads: the
kernel hands the signal to one that does not block it, and the main thread
runs the Python handler all the same.)

Not covered: other signals whose Python handler raises (a SIGALRM timeout,
a SIGTERM handler raising SystemExit).

A ``preexec_fn`` that needs fork() runs in a fork() child, and the parent
waits for it as long as it runs, for ever if it never returns: the hold
ends there (:func:`lift`), and a SIGINT that arrives while it waits is
raised at once, as in CPython.

rdmaspawn.Popen's ``__init__`` holds, replays and releases in C
(csrc/python/popen_init.c); :func:`hold`, :func:`replay` and
:func:`release` are the same steps from Python.
"""
from __future__ import annotations

import _signal  # signal's C half: the same calls without the enum conversions
import _thread
import os
import sys
import threading
from typing import Callable

from .._native import capi as _capi

__all__ = ["owner", "hold", "replay", "release", "lift"]

# On the hot path (every Popen in the main thread): plain ints and builtins.
_SIGINT = int(_signal.SIGINT)
_getsignal = _signal.getsignal
_get_ident = _thread.get_ident
_held = _capi.sigint_held
_hold = _capi.sigint_hold
_take = _capi.sigint_take
_release = _capi.sigint_release


def _set_main(ident: int) -> None:
    global _main_ident
    _main_ident = ident
    _capi.sigint_set_main(ident)


def _forked() -> None:
    _set_main(_get_ident())


# The thread that runs Python's signal handlers, told to sigint.c once (its
# owner() asks on every Popen) and kept here for lift(): threading.main_thread()'s
# ident; after os.fork() the thread that forked, for CPython and for threading alike.
_main_ident = threading.main_thread().ident or _get_ident()
_set_main(_main_ident)
os.register_at_fork(after_in_child=_forked)


#: Whether the caller may hold SIGINT back, and so must release it: the main
#: thread, with no hold on already (a Popen that runs inside a signal handler
#: during another Popen's hold holds nothing of its own). A builtin: asked on
#: every Popen.
owner: Callable[[], bool] = _capi.sigint_owner


def hold() -> None:
    """Start holding SIGINT back, where its handler is one from Python (not
    SIG_DFL, SIG_IGN or a C library's own: those cannot raise)."""
    if callable(_getsignal(_SIGINT)):
        _hold()


def replay(depth: int = 1) -> None:
    """Run SIGINT's handler once for what arrived so far, still under the
    hold (more keep being counted), with the frame ``depth`` calls up (the
    code that called Popen(), as the C Popen.__init__ gives). It may raise:
    that is the point."""
    if _take():
        handler = _getsignal(_SIGINT)
        if callable(handler):
            handler(_SIGINT, sys._getframe(depth))


def release() -> None:
    """End the hold, if one is on: SIGINT's action goes back, and a SIGINT
    that arrived after the last :func:`replay` is raised again, for the
    program's handler. It may raise."""
    if _release():
        _signal.raise_signal(_SIGINT)


def lift() -> None:
    """End the main thread's hold before it waits for a fork() child's
    ``preexec_fn``: what arrived so far is raised now, before the fork (then
    no child exists to lose), and what arrives while it waits reaches the
    program's handler at once, as in CPython. The Popen's own release then
    finds no hold. A hold is on only in the main thread: elsewhere nothing
    is lifted."""
    if _get_ident() == _main_ident and _held():
        release()
