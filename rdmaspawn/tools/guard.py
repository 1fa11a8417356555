"""Catch a ``fork()`` from Python before it happens in a process with DONTFORK memory.

:func:`guard` wraps ``os.fork``, ``os.forkpty`` and the fork_exec names that
really fork (``dropin.cpython.fork_exec_places()``). Where a fork() child would
trip on ``MADV_DONTFORK`` memory (``_host.forkrisk``'s rule, the doctor's) it
warns (:class:`ForkHazardWarning`) or raises (:class:`ForkHazardError`, no
child left). ``os.fork`` forks with its child held and reads smaps
(:mod:`.forklook`) only where the kernel's ``total_vm`` of the two differ, a
cost flat in the number of mappings; ``fork_exec`` forks and execs in one C
call, so smaps is read before it.

Every wrapper looks its ``__wrapped__`` up at each call, so :func:`unguard` can
splice ours out of a chain or leave it a pass-through. A ``fork_exec`` marked
``__rdmaspawn_forks_only_for_preexec_fn__`` is checked only for those calls;
the engine's (``__rdmaspawn__``, or under ``rdmaspawn``) never.

``RDMASPAWN=on`` loads this module at an interpreter's first fork (through
``_startup.standin``'s stand-ins, which each function here lets give way
first), so it imports nothing start-up has not loaded; at shutdown a look's
imports fail and the fork goes ahead unlooked.
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.

import _functools  # type: ignore[import-not-found]  # functools' C half, built in: partial() adds no frame
import _thread
import errno
import os
import sys

from .._startup import standin as _standin
from .._startup.markers import GUARD_WRAPPER as _MARK
from .._startup.onimport import after_subprocess

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Callable

    from .._host.procfs import Mapping

__all__ = ["ForkHazardError", "ForkHazardWarning", "guard", "is_guarded", "unguard"]


class _WithMappings(Exception):
    def __init__(self, message: str, mappings: "Sequence[Mapping]" = ()) -> None:
        super().__init__(message)
        self.mappings: list[Mapping] = list(mappings)


class ForkHazardWarning(_WithMappings, RuntimeWarning):
    """A fork() is about to run in a process that holds MADV_DONTFORK memory."""


class ForkHazardError(_WithMappings, RuntimeError):
    """A fork() was refused: the process holds MADV_DONTFORK memory (see ``.mappings``)."""


_lock = _thread.RLock()
_mode: "str | None" = None
# Our wrappers that act (the others pass through), and the one per attribute.
_active: "set[Callable[..., Any]]" = set()
_installed: "dict[tuple[str, str], Callable[..., Any]]" = {}


def _look(what: str, passed: int, pid: "int | None" = None,
          left_out: "int | None" = None) -> None:
    """Refuse the fork or warn where a child would trip on DONTFORK memory: before the
    fork, or as held_fork's decide() (csrc/python/heldfork.c), its child held lacking
    ``left_out`` pages (-1: unknown; raising kills it unrun). The warning names the
    wrapper's caller, ``passed`` stand-ins' frames further up."""
    del pid  # the held child: held_fork deals with it
    mode = _mode
    if mode is None:
        return
    try:
        # Imported at a fork: an import that fails (no descriptor, shutdown) is a
        # failed look, and a failed look never blocks a fork.
        from . import forklook

        maps = (forklook.hazards_now() if left_out is None
                else forklook.hazards_after_fork(left_out))
        msg = forklook.message(what, maps) if maps else ""
    except (OSError, ImportError):
        return
    if not maps:
        return
    if mode == "raise":
        raise ForkHazardError(msg, maps)
    import warnings

    warnings.warn(ForkHazardWarning(msg, maps), stacklevel=3 + passed)


def _as_wrapper(wrapper: "Any", original: "Any") -> None:
    """``functools.wraps(original, updated=())`` without importing functools, and our mark."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__",
                 "__type_params__"):
        try:
            setattr(wrapper, attr, getattr(original, attr))
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = original
    setattr(wrapper, _MARK, True)


def _wrap_fork(original: "Callable[..., Any]", what: str) -> "Callable[..., Any]":
    def guarded_fork(*args: "Any", **kwargs: "Any") -> "Any":
        caller = sys._getframe(1)
        passed = 0  # start-up's stand-ins of os.fork that passed the call on
        while caller.f_code is _standin.STANDIN_CODE and caller.f_back is not None:
            caller = caller.f_back
            passed += 1
        inner = guarded_fork.__wrapped__  # type: ignore[attr-defined]

        def fork() -> "Any":
            # From the caller's line: CPython's warning about forking with
            # threads (3.12+) names the frame that calls os.fork().
            try:
                from .callsite import call_from
            except (ImportError, OSError):  # at shutdown, or no descriptor left to read it
                return inner(*args, **kwargs)
            return call_from(caller, inner, args, kwargs)

        if guarded_fork not in _active or _mode is None:
            return fork()
        held = _held_fork()
        if held is None:
            _look(what, passed)
            return fork()
        look = _functools.partial(_look, what, passed)
        return held(fork, look, look)

    _as_wrapper(guarded_fork, original)
    return guarded_fork


# held_fork once loaded (at the first guarded fork), None where it cannot be.
_NOT_LOADED: "Any" = object()
_held: "Any" = _NOT_LOADED


def _held_fork() -> "Any":
    """held_fork, or None where the C core cannot be loaded (or, at shutdown, imported)."""
    global _held
    if _held is _NOT_LOADED:
        try:
            from .._native import capi
        except (OSError, ImportError) as exc:
            # No descriptor or memory left to load it, or shutdown: not for good.
            if (getattr(exc, "errno", None) in (errno.EMFILE, errno.ENFILE, errno.ENOMEM)
                    or sys.meta_path is None):
                return None
            _held = None
        else:
            _held = capi.held_fork
    return _held


def _wrap_fork_exec(original: "Callable[..., Any]", what: str) -> "Callable[..., Any]":
    def guarded_fork_exec(*args: "Any", **kwargs: "Any") -> "Any":
        inner = guarded_fork_exec.__wrapped__  # type: ignore[attr-defined]
        # Not over the engine: it forks only for a preexec_fn it does not
        # recognise, and only without DONTFORK memory; with it, it refuses
        # with PreexecFnError, which names the function and what to use.
        module = getattr(inner, "__module__", None) or ""
        engine = getattr(inner, "__rdmaspawn__", False) or (module + ".").startswith("rdmaspawn.")
        if guarded_fork_exec in _active and not engine:
            try:
                from .forklook import fork_exec_forks
            except (ImportError, OSError):  # a failed look (at shutdown, say): go ahead
                return inner(*args, **kwargs)
            if fork_exec_forks(args, bool(getattr(
                    inner, "__rdmaspawn_forks_only_for_preexec_fn__", False))):
                _look(what, 0)
        return inner(*args, **kwargs)

    _as_wrapper(guarded_fork_exec, original)
    return guarded_fork_exec


# (module, attribute, the wrapper's maker, what the message calls it)
_FORKS: "list[tuple[Any, str, Any, str]]" = [
    (os, "fork", _wrap_fork, "os.fork()"),
    (os, "forkpty", _wrap_fork, "os.forkpty()"),
]


def guard(action: str = "warn") -> None:
    """From now on, catch a fork() in this process while it holds MADV_DONTFORK memory.

    ``action="warn"`` issues :class:`ForkHazardWarning` and lets the fork go
    ahead; ``action="raise"`` raises :class:`ForkHazardError` instead of
    forking.  Calling it again changes the action; it never wraps twice.
    Thread-safe; undo with :func:`unguard`. fork_exec is wrapped once subprocess
    is imported (now, if it is): a process that never spawns never loads it.
    """
    guard_forks(action)
    after_subprocess(guard_exec)
    # A fork refused in a Pool's worker handler must fail the job, not hang
    # it, however the guard was turned on (now, or when the pool module comes).
    from ..dropin import poolhandler

    poolhandler.install_when_imported()


def guard_forks(action: str) -> None:
    """:func:`guard` for ``os.fork``/``os.forkpty`` alone: what RDMASPAWN's
    stand-ins of os.fork run at the first fork."""
    global _mode
    if action not in ("warn", "raise"):
        raise ValueError(f"action must be 'warn' or 'raise', not {action!r}")
    _standin.give_way_forks()
    with _lock:
        _install(_FORKS)
        if _mode != action:
            _marker(action)
        _mode = action


def guard_below(standin: "Any", attr: str) -> None:
    """Guard the calls of RDMASPAWN's stand-in of ``os.<attr>`` that someone else's
    wrapper holds without ``__wrapped__``: ours goes under it, a pass-through once unguarded."""
    with _lock:
        wrapper = _wrap_fork(standin.__wrapped__, f"os.{attr}()")
        standin.__wrapped__ = wrapper
        _active.add(wrapper)


def guard_exec(_: "Any" = None) -> None:
    """:func:`guard` for fork_exec: wrap its names now (imports subprocess)."""
    _standin.give_way_forks()  # _mode is RDMASPAWN's from here, if it is on
    with _lock:
        if _mode is None:  # unguard()ed before subprocess came
            return
        import subprocess  # noqa: F401  # its alias of fork_exec is one of the places

        from ..dropin import cpython as _cpython

        _install([(owner, attr, _wrap_fork_exec,
                   "subprocess (fork_exec)" if owner.__name__ == "_posixsubprocess"
                   else "subprocess.Popen")
                  for owner, attr in _cpython.fork_exec_places()])


def _marker(action: "str | None") -> None:
    """Say from outside that the guard is on (and how), or off: the doctor reads it."""
    try:
        from .._startup import markers

        markers.set_guard(action)
    except (ImportError, OSError):  # no C core: no marker, the doctor says "not guarded"
        pass


def _install(targets: "list[tuple[Any, str, Any, str]]") -> None:
    for module, attr, wrap, what in targets:
        current = getattr(module, attr, None)
        if current is None:
            continue
        key = (module.__name__, attr)
        mine = _installed.get(key)
        if mine is not None and (mine is current or mine in _active):
            # Still on top, or still in someone else's chain and acting.
            _active.add(mine)
            continue
        if not getattr(current, _MARK, False):  # else one of ours put back by someone's undo
            current = wrap(current, what)
            setattr(module, attr, current)
        _installed[key] = current
        _active.add(current)


def unguard() -> None:
    """Stop guarding; put back what :func:`guard` replaced where nobody wrapped it since."""
    global _mode
    from ..dropin import wrapping as _wrapping

    _standin.give_way_forks()
    with _lock:
        if _mode is not None:
            _marker(None)
        _mode = None
        for (module_name, attr), mine in list(_installed.items()):
            _active.discard(mine)
            if _wrapping.splice_out(sys.modules[module_name], attr, mine):
                del _installed[module_name, attr]
            # else: someone wrapped ours and calls it directly; it stays in
            # their chain as a pass-through.


def is_guarded() -> "str | None":
    """``"warn"`` or ``"raise"`` while guarding, else ``None``."""
    _standin.give_way_forks()
    return _mode
