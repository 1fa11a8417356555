"""Hold SIGINT back while ``rdmaspawn.Popen`` starts a child.

A KeyboardInterrupt inside Popen loses the pid or the pipes' fds. So while a
Popen is built SIGINT only counts (csrc/python/sigint.c); once it is complete
the program's handler runs for what arrived, and if it raises, the child is
killed and reaped and its pipes closed (``Popen._discard``). Blocking SIGINT
would hold nothing with other threads, and only the main thread runs Python's
handlers: elsewhere nothing is held. A fork() child's ``preexec_fn`` may run
for ever: the hold ends before the wait for it (:func:`lift`).

Whether a hold is on is the C side's word, never a value handed back to
Python, so an exception between the hold and its caller's ``try`` cannot
leave it on. Python's table of handlers is never touched, the kernel's action
goes back whole, and one the program sets meanwhile stays. Not covered: other
signals whose handler raises (a SIGALRM timeout, SystemExit from SIGTERM).
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


# The thread that runs Python's signal handlers, told to sigint.c once (its
# owner() asks on every Popen) and kept here for lift(): threading.main_thread()'s
# ident; after os.fork() the thread that forked, for CPython and for threading alike.
_main_ident = threading.main_thread().ident or _get_ident()
_set_main(_main_ident)
os.register_at_fork(after_in_child=lambda: _set_main(_get_ident()))


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
    ``preexec_fn``: what arrived is raised before the fork (no child to
    lose), and what arrives while it waits at once, as in CPython."""
    if _get_ident() == _main_ident and _held():
        release()
