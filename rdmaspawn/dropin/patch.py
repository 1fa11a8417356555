"""``patch()``: route every child the standard library starts through the engine.

``subprocess.Popen`` and its helpers, ``os.popen``, asyncio and
multiprocessing's ``spawn`` and ``forkserver`` all end in one primitive,
``_posixsubprocess.fork_exec``; replacing it and ``Popen._posix_spawn``
covers code that imported ``Popen`` long before the patch. ``os.spawn*`` get
the engine too. ``os.fork``, multiprocessing's ``fork`` and ``pty`` cannot be
patched: see ``rdmaspawn.guard()``.
"""
from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

from .._startup import markers as _markers
from .._startup import standin as _standin
from . import cpython as _cpython
from . import errpipe as _errpipe
from . import execute_child as _execute_child
from . import forkexec as _forkexec
from . import posixspawn as _posixspawn
from . import spawnv as _spawnv
from . import startmethod as _startmethod
from . import wrapping as _wrapping

__all__ = ["patch", "unpatch", "patched", "is_patched", "get_context"]

_lock = threading.Lock()
# (object, attribute, value before, value we set), in the order applied;
# _ABSENT as the value before: an attribute patch() added.
_applied: list[tuple[Any, str, Any, Any]] | None = None
_ABSENT = object()
# The default start methods patch(start_method=) set, for unpatch() to undo
# (only those: RDMASPAWN's stays).
_preferences: list[_startmethod.Preference] = []


def _swap(done: list[tuple[Any, str, Any, Any]], obj: Any, name: str, new: Any) -> None:
    done.append((obj, name, getattr(obj, name, _ABSENT), new))
    setattr(obj, name, new)


def patch(start_method: str | None = None) -> None:
    """Make every child this process's standard library starts fork-safe.

    ``start_method="forkserver"`` (or ``"spawn"``) also makes it
    multiprocessing's default start method unless the program already chose
    one (see :mod:`rdmaspawn.dropin.startmethod`; ``"forkserver"`` is
    already the default on 3.14+). Idempotent and thread-safe;
    undone by :func:`unpatch`.
    """
    global _applied
    _standin.give_way()  # RDMASPAWN's stand-ins first: see is_patched()
    with _lock:
        if start_method is not None:
            preference = _startmethod.prefer_start_method(start_method)
            if preference is not None:
                _preferences.append(preference)
        if _applied is not None:
            return
        # This CPython calls fork_exec as we know, or no patch at all.
        home, attr = _cpython.require().home
        done: list[tuple[Any, str, Any, Any]] = []
        fork_exec = _forkexec.make_fork_exec(_posixsubprocess.fork_exec)
        _swap(done, _posixsubprocess, "fork_exec", fork_exec)
        if home == "subprocess":  # 3.11+ calls its own alias, bound at import
            sub_fork_exec = _forkexec.make_fork_exec(getattr(subprocess, attr))
            _swap(done, subprocess, attr, sub_fork_exec)
        if _cpython.require().posix_spawn is not None:  # else CPython's own: no fork
            _swap(done, subprocess.Popen, "_posix_spawn", _posixspawn.posix_spawn_method)
        # Its _execute_child with the error pipe in memory where its
        # fork_exec is ours (dropin/execute_child.py), if it can be made.
        cpython_method = subprocess.Popen._execute_child  # type: ignore[attr-defined]
        method = _execute_child.method(cpython_method)
        if method is not None:
            # For good: unpatch() leaves them, since a spawn still inside the
            # method, or a wrapper that kept it, looks them up afterwards;
            # for any fork_exec not rdmaspawn's they are os's own calls.
            for name, call in zip(_execute_child.NAMES, _errpipe.CALLS):
                setattr(subprocess, name, call)
            _swap(done, subprocess.Popen, "_execute_child", method)
        if hasattr(os, "_spawnvef"):
            _swap(done, os, "_spawnvef", _spawnv.spawnvef)
        _applied = done
        _markers.set_patched(True)  # for the doctor, from outside


def unpatch() -> None:
    """Undo :func:`patch` (and the start method it set, nothing else);
    harmless when not patched."""
    global _applied
    _standin.give_way()
    with _lock:
        while _preferences:
            _startmethod.undo_preference(_preferences.pop())
        if _applied is None:
            return
        for obj, name, old, new in reversed(_applied):
            if old is _ABSENT:
                if getattr(obj, name, None) is new:
                    delattr(obj, name)
                continue
            # Off the attribute, or out of the chain of whoever wrapped ours
            # since (rdmaspawn.guard() does); else it stays there.
            _wrapping.splice_out(obj, name, new, old)
        _applied = None
        _markers.set_patched(False)


def is_patched() -> bool:
    """Whether :func:`patch` is in force."""
    # Where RDMASPAWN's start-up put stand-ins for patch(), they take their
    # place first, so that the answer is as if it had patched at start-up.
    # Here, not at this module's import: a first spawn in another thread
    # settles under the stand-ins' lock and imports this module, and an
    # import of it under way here would wait for that lock while the other
    # thread waits for the import (a deadlock, tests/test_autostart.py).
    _standin.give_way()
    return _applied is not None


@contextlib.contextmanager
def patched() -> Iterator[None]:
    """``with rdmaspawn.patched():`` patch for the block, then put back what was."""
    was = is_patched()
    patch()
    try:
        yield
    finally:
        if not was:
            unpatch()


def get_context(method: str = "forkserver") -> Any:
    """A multiprocessing context whose workers never come from a fork of this process.

    ``"forkserver"`` (the default; CPython 3.14's default on Linux) or
    ``"spawn"``. Applies ``rdmaspawn.patch()`` (idempotent) so that the
    server, each spawn child and the resource tracker start through the
    engine. Workers need what those methods always need: picklable targets
    and arguments, and a main module that can be imported again (the usual
    ``if __name__ == "__main__":``).
    """
    _startmethod.check_method(method)
    import multiprocessing

    patch()
    return multiprocessing.get_context(method)

