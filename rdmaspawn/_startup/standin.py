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

The first call of any stand-in, or of ``dropin.patch``'s ``is_patched()``,
``patch()`` or ``unpatch()`` (see :func:`give_way`), runs what the start-up
hook deferred (``patch()``, the guard's wrappers of fork_exec) under one lock,
after taking every stand-in out of its place; the call then goes on to what
is there now. No child starts before that: a stand-in is the only way past
its name. A stand-in that someone else's wrapper holds without
``__wrapped__`` stays there and passes calls to what it replaced.

The guard's wrappers of ``os.fork`` and ``os.forkpty`` wait the same way,
for the first fork: under ``RDMASPAWN``'s guard, start-up puts a stand-in at
each (:func:`install_forks`), and the first call of one, or the first use of
``tools.guard``'s functions (:func:`give_way_forks`), loads the guard and
puts its wrappers in their place: loading ``tools.guard`` at start-up would
be a large share of what ``RDMASPAWN=on`` adds to every interpreter
(docs/benchmark.md).  The guard's wrapper of ``os.fork`` skips a
stand-in's frame (:data:`STANDIN_CODE`) to find the line that called it.

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

__all__ = ["FORK_EXEC_HOMES", "STANDIN_CODE", "forks_pending", "give_way", "give_way_forks", "install",
           "install_forks", "took_out"]

#: Where CPython's _execute_child may find fork_exec, as (module, attribute):
#: the C module's own (3.9-3.10) and subprocess's alias bound at its import
#: (3.11+). One of dropin.cpython's facts, kept here because start-up puts a
#: stand-in at each and must not import that module; its gate (require())
#: refuses a CPython whose _execute_child calls fork_exec through another.
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

    The thread that runs it may come back here (the settle calls
    ``dropin.patch``'s ``patch()``, which calls this): it returns at once.
    No import calls this (dropin.patch's did, at its end: an import of it in
    one thread then waited here for the settle of another, which waited for
    that import)."""
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
    (the guard's wrappers in their place) at the first call of one, or at
    :func:`give_way_forks`.  ``settle`` returns False where it could not load
    the guard (no descriptor left, or at shutdown): that fork goes ahead
    unlooked, as any fork after a failed look does, and the next one tries
    again."""
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
    wait for its end.  ``tools.guard`` calls it before it reads or changes its
    state, so that it answers as if loaded at start-up; the thread running the
    settle comes back here from there and returns at once.  The settle
    imports the guard (and dropin.wrapping, where a wrapper holds a
    stand-in) under this lock: neither takes it nor imports subprocess,
    whose import does (``_place_at_subprocess``) and then waits here."""
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
