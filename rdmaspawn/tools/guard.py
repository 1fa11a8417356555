"""Catch a ``fork()`` from Python before it happens in a process with DONTFORK memory.

:func:`guard` wraps the module attributes through which Python code forks:

- ``os.fork`` (also what ``multiprocessing``'s "fork" start method calls) and
  ``os.forkpty`` (what ``pty.fork()`` calls);
- ``_posixsubprocess.fork_exec`` and, on 3.11+, ``subprocess._fork_exec`` (the
  name ``subprocess.Popen`` calls), but only for the calls that really fork:
  always on 3.9; on 3.10+ when ``preexec_fn`` is given, when ``user``/
  ``group``/``extra_groups`` are, or (3.10-3.13) when ``subprocess._USE_VFORK``
  is false; 3.14 has no such flag and ignores one set by hand.

If the process holds ``MADV_DONTFORK`` memory that a fork() child trips on
(the doctor's rule, :func:`rdmaspawn._host.forkrisk.fork_hazards`: device
memory and a buffer on pages of its own left out), it warns with :class:`ForkHazardWarning` (and forks) or raises
:class:`ForkHazardError` (and no child is left). How it knows:

- ``os.fork``/``os.forkpty``: the fork goes ahead with its child held before
  it runs any of the program's code (``csrc/forkwatch.c``), and the kernel's
  own count says whether the child lacks pages: ``total_vm`` from
  ``/proc/PID/statm``, read before and after, which costs the same at any
  number of mappings.  Only where the counts differ does the guard read
  ``/proc/self/smaps`` (:func:`_after_fork`, through :mod:`.forklook`); a refused child is killed
  before it runs and reaped.  The same count of pages every time, all of it
  device memory already seen, is answered from ``/proc/self/maps`` (see
  :mod:`.devicememo`).
- ``fork_exec``, and a build without the C core: ``/proc/self/smaps``,
  searched before the call (:func:`_check`): ``fork_exec`` forks and execs
  inside one C call, so nothing can be held there.

Composition with ``rdmaspawn.patch()`` and other wrappers -- the convention:

- Every wrapper sets ``__wrapped__`` to what it replaced.  Our wrappers also
  carry ``__rdmaspawn_guard__ = True``.
- Wrappers look up ``__wrapped__`` at each call (ours and the rdmaspawn
  engine's), so a link can be taken out of a chain by rewriting the
  ``__wrapped__`` of the wrapper above it.
- :func:`unguard` puts back what it replaced where the attribute is still our
  wrapper, and otherwise splices our wrapper out of the ``__wrapped__`` chain
  below the attribute; failing both (a wrapper that does not follow this
  convention), ours stays in that chain as a pass-through.
- A ``fork_exec`` replacement that forks only to run a ``preexec_fn`` (the
  rdmaspawn engine's) says so with ``__rdmaspawn__ = True`` (or
  ``__rdmaspawn_forks_only_for_preexec_fn__ = True``, or by living in a module
  under ``rdmaspawn``); when guard wraps such
  a function it checks only calls with a ``preexec_fn``.  Such a replacement
  should hand ``preexec_fn`` calls to the function it replaced, so that a
  guard applied before it still sees them.

``fork_exec`` is positional only; which argument is which on each version,
and when CPython's forks rather than vforks, is ``rdmaspawn.dropin.cpython``'s.

Why these pieces share one module: they are one job, putting the guard's
wrappers in place and taking them off again (what it wraps, the wrappers,
how a wrapper comes off a chain, how one goes under RDMASPAWN's stand-in
where it cannot come off), and this is the module ``RDMASPAWN=on`` loads
into every interpreter that forks, at its first fork (start-up puts
stand-ins at ``os.fork`` and ``os.forkpty``, see
``rdmaspawn._startup.standin``; each function here that reads or changes the
guard's state first lets them give way), where each further module is one
more import for that interpreter. What a wrapper reads when a fork comes
(/proc, the doctor's rule, the message, whether a ``fork_exec`` call forks)
is :mod:`.forklook`'s, loaded at the first fork; ``guarded()``, which no
fork needs, is :mod:`.guarded`'s.
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

# RDMASPAWN loads this module in every interpreter of a job that forks, so
# it imports nothing that start-up has not loaded already: the
# rest (/proc, the C core, warnings, subprocess, CPython's table) is imported
# where it is used, at a fork or a spawn. At interpreter shutdown those
# imports fail (sys.meta_path is None): the fork then goes ahead unlooked, as
# after any failed look, and does what it does unguarded (forks on 3.9-3.11,
# raises PythonFinalizationError on 3.13+).

__all__ = [
    "ForkHazardError",
    "ForkHazardWarning",
    "guard",
    "is_guarded",
    "unguard",
]

_PREEXEC_ONLY = "__rdmaspawn_forks_only_for_preexec_fn__"


class ForkHazardWarning(RuntimeWarning):
    """A fork() is about to run in a process that holds MADV_DONTFORK memory."""

    def __init__(self, message: str, mappings: "Sequence[Mapping]" = ()) -> None:
        super().__init__(message)
        self.mappings: list[Mapping] = list(mappings)


class ForkHazardError(RuntimeError):
    """A fork() was refused: the process holds MADV_DONTFORK memory (see ``.mappings``)."""

    def __init__(self, message: str, mappings: "Sequence[Mapping]" = ()) -> None:
        super().__init__(message)
        self.mappings: list[Mapping] = list(mappings)


_lock = _thread.RLock()
_mode: "str | None" = None
# Our wrappers that act (the others pass through), and the one per attribute.
_active: "set[Callable[..., Any]]" = set()
_installed: "dict[tuple[str, str], Callable[..., Any]]" = {}


def _check(what: str, passed: int = 0) -> None:
    """Before a fork: refuse it or warn if the process holds DONTFORK memory.
    ``passed``: stand-ins' frames between the wrapper and its caller."""
    mode = _mode
    if mode is None:
        return
    try:
        # Imported here, at a fork (not at every start under RDMASPAWN=on),
        # so the import is part of the look: one that fails (no descriptor
        # to read the module with, no sys.meta_path at shutdown) is a failed
        # look too.
        from . import forklook

        maps = forklook.hazards_now()
        msg = forklook.message(what, maps) if maps else ""
    except (OSError, ImportError):
        return  # /proc unreadable, or no import at shutdown: never block on a failed look
    if maps:
        # stacklevel 5: _hazard -> _check -> wrapper -> the caller of os.fork()/fork_exec().
        _hazard(mode, msg, maps, stacklevel=5 + passed)


def _after_fork(what: str, passed: int, pid: int, left_out: int) -> None:
    """The child of a fork is held and lacks ``left_out`` pages (-1: unknown): refuse or warn.

    Called by held_fork (csrc/python/heldfork.c) only where the parent's and
    the child's total_vm differ. Raising makes it kill the child unrun.
    """
    del pid  # the child: held_fork deals with it
    mode = _mode
    if mode is None:
        return
    try:
        from . import forklook

        maps = forklook.hazards_after_fork(left_out)
        msg = forklook.message(what, maps) if maps else ""
    except (OSError, ImportError):
        return  # /proc (or a module) unreadable, or no import at shutdown: never block a fork
    if maps:
        # stacklevel 4: _hazard -> _after_fork -> wrapper (held_fork is C) -> the caller
        # (and the stand-ins' frames passed between).
        _hazard(mode, msg, maps, stacklevel=4 + passed)


def _unheld(what: str, passed: int) -> None:
    """held_fork cannot hold the child (no descriptor for its pipe): look before the fork."""
    # Called from C, as _after_fork is: one frame more than the wrapper's own
    # _check(), which keeps the warning on the caller's line.
    _check(what, passed)


def _hazard(mode: str, msg: str, maps: "Sequence[Mapping]", stacklevel: int) -> None:
    if mode == "raise":
        raise ForkHazardError(msg, maps)
    import warnings

    warnings.warn(ForkHazardWarning(msg, maps), stacklevel=stacklevel)


def _fork_exec_would_fork(args: "tuple[Any, ...]", inner: "Any") -> bool:
    """Whether this call of ``inner`` (a fork_exec) will fork() (see the module docstring)."""
    try:
        from .forklook import fork_exec_forks
    except (ImportError, OSError):
        return False  # a failed look (at shutdown, say): the call goes ahead, as unguarded
    return fork_exec_forks(args, _forks_only_for_preexec(inner))


def _is_engine(fn: "Any") -> bool:
    if getattr(fn, "__rdmaspawn__", False):
        return True
    module = getattr(fn, "__module__", None) or ""
    return module == "rdmaspawn" or module.startswith("rdmaspawn.")


def _forks_only_for_preexec(fn: "Any") -> bool:
    return bool(getattr(fn, _PREEXEC_ONLY, False)) or _is_engine(fn)


def _wraps(wrapper: "Any", original: "Any") -> None:
    """``functools.wraps(original, updated=())`` without importing functools."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__",
                 "__type_params__"):
        try:
            value = getattr(original, attr)
        except AttributeError:
            continue
        try:
            setattr(wrapper, attr, value)
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = original


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
            call_from = _call_from()
            if call_from is None:  # at shutdown, before any fork loaded it
                return inner(*args, **kwargs)
            return call_from(caller, inner, args, kwargs)

        if guarded_fork not in _active or _mode is None:
            return fork()
        held = _held_fork()
        if held is None:
            _check(what, passed)
            return fork()
        return held(fork, _functools.partial(_after_fork, what, passed),
                    _functools.partial(_unheld, what, passed))

    _wraps(guarded_fork, original)
    setattr(guarded_fork, _MARK, True)
    return guarded_fork


def _call_from() -> "Callable[..., Any] | None":
    """callsite.call_from, loaded at the first fork (None where it cannot be imported)."""
    try:
        from .callsite import call_from
    except (ImportError, OSError):  # at shutdown, or no descriptor left to read it
        return None
    return call_from


# csrc/python/heldfork.c's held_fork once loaded (the first guarded fork);
# _NOT_LOADED before, None where the C core cannot be loaded.
_NOT_LOADED: "Any" = object()
_held: "Any" = _NOT_LOADED


def _held_fork() -> "Callable[..., Any] | None":
    """held_fork, or None where the C core cannot be loaded (or, at shutdown, imported)."""
    global _held
    held = _held
    if held is _NOT_LOADED:
        try:
            from .._native import capi
        except OSError as exc:  # no descriptor or memory left to load it: try again next time
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                return None
            held = None
        except ImportError:
            if sys.meta_path is None:
                return None  # at shutdown: not for good, a later fork does not come
            held = None
        else:
            held = capi.held_fork
        _held = held
    result: "Callable[..., Any] | None" = held  # noqa: UP037
    return result


def _wrap_fork_exec(original: "Callable[..., Any]", what: str) -> "Callable[..., Any]":
    def guarded_fork_exec(*args: "Any", **kwargs: "Any") -> "Any":
        inner = guarded_fork_exec.__wrapped__  # type: ignore[attr-defined]
        # Not over the engine: it forks only for a preexec_fn it does not
        # recognise, and only without DONTFORK memory; with it, it refuses
        # with PreexecFnError, which names the function and what to use.
        if (guarded_fork_exec in _active and not _is_engine(inner)
                and _fork_exec_would_fork(args, inner)):
            _check(what)
        return inner(*args, **kwargs)

    _wraps(guarded_fork_exec, original)
    setattr(guarded_fork_exec, _MARK, True)
    return guarded_fork_exec


if TYPE_CHECKING:
    _Target = tuple[Any, str, Callable[[Callable[..., Any], str], Callable[..., Any]], str]


_FORKS: "list[_Target]" = [
    (os, "fork", _wrap_fork, "os.fork()"),
    (os, "forkpty", _wrap_fork, "os.forkpty()"),
]


def _exec_targets() -> "list[_Target]":
    """fork_exec's names: imports subprocess (see guard())."""
    import subprocess  # noqa: F401  # its alias of fork_exec is one of the places

    from ..dropin import cpython as _cpython

    return [(owner, attr, _wrap_fork_exec,
             "subprocess (fork_exec)" if owner.__name__ == "_posixsubprocess"
             else "subprocess.Popen")
            for owner, attr in _cpython.fork_exec_places()]


def guard(action: str = "warn") -> None:
    """From now on, catch a fork() in this process while it holds MADV_DONTFORK memory.

    ``action="warn"`` issues :class:`ForkHazardWarning` and lets the fork go
    ahead; ``action="raise"`` raises :class:`ForkHazardError` instead of
    forking.  Calling it again changes the action; it never wraps twice.
    Thread-safe; undo with :func:`unguard`.

    fork_exec is wrapped once subprocess is imported (now, if it is): a
    process that never spawns never loads it, and nothing reaches fork_exec
    before that import (see ``after_subprocess``).
    """
    guard_forks(action)
    after_subprocess(_guard_exec)
    # A fork refused in a Pool's worker handler must fail the job, not hang
    # it, however the guard was turned on (now, or when the pool module comes).
    from ..dropin import poolhandler

    poolhandler.install_when_imported()


def guard_forks(action: str) -> None:
    """The part of :func:`guard` for ``os.fork``/``os.forkpty`` alone: what
    RDMASPAWN's stand-ins of os.fork run at the first fork (the rest comes
    with the first spawn, see ``rdmaspawn._startup.standin``, and
    multiprocessing.pool's import)."""
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
    """Guard the calls of RDMASPAWN's stand-in of ``os.<attr>`` that someone
    else's wrapper holds without ``__wrapped__`` (start-up could not take it
    out): our wrapper goes under it, where it looks each call up.  It acts
    while the guard is on, as the attribute's does; unguard() leaves it there
    as a pass-through, as it leaves ours in such a chain."""
    what = next(w for _, name, _, w in _FORKS if name == attr)
    with _lock:
        wrapper = _wrap_fork(standin.__wrapped__, what)
        standin.__wrapped__ = wrapper
        _active.add(wrapper)


def guard_exec() -> None:
    """The part of :func:`guard` for fork_exec: wrap its names now (imports subprocess)."""
    _guard_exec(None)


def _marker(action: "str | None") -> None:
    """Say from outside that the guard is on (and how), or off: the doctor reads it."""
    try:
        from .._startup import markers

        markers.set_guard(action)
    except (ImportError, OSError):  # no C core: no marker, the doctor says "not guarded"
        pass


def _guard_exec(_: "Any") -> None:
    _standin.give_way_forks()  # _mode is RDMASPAWN's from here, if it is on
    with _lock:
        if _mode is not None:  # not unguard()ed before subprocess came
            _install(_exec_targets())


def _install(targets: "list[_Target]") -> None:
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
        if getattr(current, _MARK, False):
            _active.add(current)  # one of ours put back by someone's undo
            _installed[key] = current
            continue
        wrapper = wrap(current, what)
        setattr(module, attr, wrapper)
        _installed[key] = wrapper
        _active.add(wrapper)


def unguard() -> None:
    """Stop guarding; put back what :func:`guard` replaced where nobody wrapped it since."""
    global _mode
    from ..dropin import wrapping as _wrapping

    _standin.give_way_forks()
    with _lock:
        if _mode is not None:
            _marker(None)
        _mode = None
        for key, mine in list(_installed.items()):
            module_name, attr = key
            _active.discard(mine)
            if _wrapping.splice_out(sys.modules[module_name], attr, mine):
                del _installed[key]
            # else: someone wrapped ours and calls it directly; it stays in
            # their chain as a pass-through.


def is_guarded() -> "str | None":
    """``"warn"`` or ``"raise"`` while guarding, else ``None``."""
    _standin.give_way_forks()
    return _mode
