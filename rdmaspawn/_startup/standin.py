"""Stand-ins for ``patch()`` and the guard, put in place by RDMASPAWN's
start-up and made real at the first spawn or fork.

Loading the patch and the engine is most of what ``import subprocess`` would
cost an interpreter under ``RDMASPAWN=on``, and most never spawn. So a
stand-in goes at each name through which the standard library starts a child
(:data:`FORK_EXEC_HOMES`, ``Popen._posix_spawn``, ``os._spawnvef``), inside
subprocess's own import, so no thread sees subprocess without them; the first
call of one takes them all out, under one lock, before any child starts. One
that another wrapper holds without ``__wrapped__`` stays and passes calls on.
Under the guard, ``os.fork`` and ``os.forkpty`` get stand-ins too, so that
``tools.guard`` loads at the first fork, not at start-up; the guard's wrapper
skips a stand-in's frame (:data:`STANDIN_CODE`) to find the caller's line.
Imports nothing the interpreter has not loaded already.
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

__all__ = ["FORK_EXEC_HOMES", "STANDIN_CODE", "forks_pending", "give_way", "give_way_forks", "install",
           "install_forks", "took_out"]

#: Where _execute_child may find fork_exec (3.9-3.10; 3.11+'s alias): one of
#: dropin.cpython's facts, here because start-up must not import that module.
FORK_EXEC_HOMES = (("_posixsubprocess", "fork_exec"), ("subprocess", "_fork_exec"))
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
# The guard's: what the stand-ins of os.fork/os.forkpty wait for, and their places.
_fork_settle: "Callable[[list[tuple[Any, str, Any, Any]]], bool] | None" = None
_fork_placed: "list[tuple[Any, str, Any, Any]]" = []
# Nothing waits for the guard: never asked for, or its settle has run.
_forks_done = True


def _standin(owner: "Any", attr: str, original: "Any",
             settle_first: "Callable[[], None]") -> "Callable[..., Any]":
    def standin(*args: "Any", **kwargs: "Any") -> "Any":
        settle_first()
        # Taken out: the attribute as it is now.  Else what it stands for,
        # looked up at each call (the wrappers' convention): the guard's
        # settle puts its wrapper there where someone else's holds it.
        below = getattr(standin, "__wrapped__", original)
        target = getattr(owner, attr, None) if standin in _gone else below
        if target is standin or target is None:
            target = below
        return target(*args, **kwargs)

    standin.__wrapped__ = original  # type: ignore[attr-defined]
    standin.__name__ = standin.__qualname__ = getattr(original, "__name__", attr)
    setattr(standin, _MARK, True)
    return standin


def _place(owner: "Any", attr: str, placed: "list[tuple[Any, str, Any, Any]] | None" = None,
           settle_first: "Callable[[], None] | None" = None) -> None:
    original = getattr(owner, attr, None)
    if original is None or getattr(original, _MARK, False):
        return
    standin = _standin(owner, attr, original, settle_first or give_way)
    setattr(owner, attr, standin)
    (_placed if placed is None else placed).append((owner, attr, standin, original))


def _place_at_subprocess(subprocess: "ModuleType") -> None:
    # Inside subprocess's import (at_once): nothing of ours may be imported here.
    with _lock:
        if _settle is None:
            return  # already made real, or never asked for
        import _posixsubprocess

        owners = {"_posixsubprocess": _posixsubprocess, "subprocess": subprocess}
        for module, attr in FORK_EXEC_HOMES:
            _place(owners[module], attr)  # one it does not have is left alone
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
    The thread running it comes back here (through ``patch()``) and returns.
    No import calls this: one thread's import would wait for another's settle,
    which waits for that import."""
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


#: The code of every stand-in (one def): a frame running it passes a call on.
STANDIN_CODE = _standin(None, "", None, give_way).__code__


def install_forks(settle: "Callable[[list[tuple[Any, str, Any, Any]]], bool]") -> None:
    """Put stand-ins at ``os.fork`` and ``os.forkpty``; run ``settle(placed)``
    at the first call of one, or at :func:`give_way_forks`. Where ``settle``
    returns False (no descriptor left, at shutdown), that fork goes ahead
    unlooked and the next one tries again."""
    global _fork_settle, _forks_done
    with _lock:
        _fork_settle, _forks_done = settle, False
        for attr in ("fork", "forkpty"):
            _place(os, attr, _fork_placed, give_way_forks)


def forks_pending() -> bool:
    """Whether the guard's stand-ins still wait for their first call."""
    return _fork_settle is not None


def give_way_forks() -> None:
    """Put the guard in force in place of its stand-ins, once; other threads
    wait. ``tools.guard`` calls it before it reads its state. The settle
    imports under this lock only what neither takes it nor imports subprocess
    (whose import takes it, ``_place_at_subprocess``)."""
    global _fork_settle, _forks_done
    if _forks_done:
        return
    with _lock:
        settle, _fork_settle = _fork_settle, None
        if settle is None:
            return  # this thread is running it
        if settle(list(_fork_placed)):
            _forks_done = True
        else:
            _fork_settle = settle
