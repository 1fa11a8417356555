"""Stand-ins for ``patch()`` and the guard of ``fork_exec``, put in place at
``import subprocess`` by RDMASPAWN's start-up, made real at the first spawn.

Loading the patch and the engine is most of what ``import subprocess``
would cost an interpreter under ``RDMASPAWN=on`` (``python -m
rdmaspawn.bench.startup`` measures it), and most interpreters of a job never
spawn. So the import puts a stand-in at each name through which the standard
library starts a child: ``_posixsubprocess.fork_exec``, its 3.11+ alias
``subprocess._fork_exec``, ``Popen._posix_spawn`` and ``os._spawnvef`` (the
last one at start-up: ``os.spawn*`` need no subprocess). It does so inside
subprocess's own import (``onimport``'s ``at_once``), so no thread ever sees
subprocess without them.

The first call of any stand-in, or the first import of ``dropin.patch``
(``is_patched()``, ``patch()``: see :func:`give_way`), runs what the start-up
hook deferred (``patch()``, the guard's wrappers of fork_exec) under one lock,
after taking every stand-in out of its place; the call then goes on to what
is there now. No child starts before that: a stand-in is the only way past
its name. A stand-in that someone else's wrapper holds without
``__wrapped__`` stays there and passes calls to what it replaced.

This module imports nothing the interpreter has not loaded already; what it
runs is handed to it by ``autostart``.
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.
import _thread
import os
import sys

from .onimport import after_subprocess

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Callable

__all__ = ["give_way", "install", "took_out"]

_MARK = "__rdmaspawn_standin__"
_lock = _thread.RLock()
# What the stand-ins wait for (autostart's), until it has run; None after.
_settle: "Callable[[list[tuple[Any, str, Any, Any]]], None] | None" = None
# (owner, attribute, stand-in, what it replaced), in the order placed.
_placed: "list[tuple[Any, str, Any, Any]]" = []
# Stand-ins taken out of their place by the settle: they pass calls on to
# their attribute as it is now (the rest, to what they replaced).
_gone: "set[Any]" = set()
_with_patch = False
# The settle has run (another thread's stand-in waits on _lock until then).
_done = False


def _standin(owner: "Any", attr: str, original: "Any") -> "Callable[..., Any]":
    def standin(*args: "Any", **kwargs: "Any") -> "Any":
        give_way()
        target = getattr(owner, attr, None) if standin in _gone else original
        if target is standin or target is None:
            target = original
        return target(*args, **kwargs)

    standin.__wrapped__ = original  # type: ignore[attr-defined]
    standin.__name__ = standin.__qualname__ = getattr(original, "__name__", attr)
    setattr(standin, _MARK, True)
    return standin


def _place(owner: "Any", attr: str) -> None:
    original = getattr(owner, attr, None)
    if original is None or getattr(original, _MARK, False):
        return
    standin = _standin(owner, attr, original)
    setattr(owner, attr, standin)
    _placed.append((owner, attr, standin, original))


def _place_at_subprocess(subprocess: "ModuleType") -> None:
    # Inside subprocess's import (at_once): nothing of ours may be imported here.
    with _lock:
        if _settle is None:
            return  # already made real, or never asked for
        import _posixsubprocess

        _place(_posixsubprocess, "fork_exec")
        # 3.11+: Popen calls subprocess's alias, bound at its import
        # (dropin.cpython's table: home ("subprocess", "_fork_exec")).
        if hasattr(subprocess, "_fork_exec"):
            _place(subprocess, "_fork_exec")
        if _with_patch:
            _place(subprocess.Popen, "_posix_spawn")


def install(settle: "Callable[[list[tuple[Any, str, Any, Any]]], None]", patch: bool) -> None:
    """Put stand-ins in place (``Popen._posix_spawn`` and ``os._spawnvef`` too
    with ``patch``) and run ``settle(placed)`` at the first use of one."""
    global _settle, _with_patch
    with _lock:
        _settle, _with_patch = settle, patch
        if patch and hasattr(os, "_spawnvef"):
            _place(os, "_spawnvef")
    after_subprocess(_place_at_subprocess, at_once=True)


def took_out(standin: "Any") -> None:
    """The settle took ``standin`` out of its place: it now passes calls to the attribute."""
    _gone.add(standin)


def give_way() -> None:
    """Run what the stand-ins stand for, once; other threads wait for its end.

    The thread that runs it may come back here (the settle imports
    ``dropin.patch``, which calls this): it returns at once."""
    global _settle, _done
    if _done:
        return
    if _settle is not None and "subprocess" not in sys.modules:
        # Before the lock: subprocess's import takes it to place the stand-ins
        # (in another thread, maybe, which would then wait for this one).
        import subprocess  # noqa: F401  # the stand-ins to take out are all placed
    with _lock:
        settle, _settle = _settle, None
        if settle is None:
            return  # never asked for, or this thread is running it
        try:
            settle(list(_placed))
        finally:
            _done = True
