"""A drop-in for ``Popen._posix_spawn`` built on the engine.

For simple requests CPython's ``_execute_child`` takes a shortcut through
``os.posix_spawn()`` (3.9-3.12: with ``close_fds=False``; 3.13: also with
``close_fds=True`` where ``POSIX_SPAWN_CLOSEFROM`` exists). That path has its
own rules: the environment comes from ``os.environ`` (3.9-3.12), and every
failure, in the child or not, is an ``OSError`` naming the executable. This
replacement starts the child with the engine and keeps those rules: the call
is converted and spawned in C (csrc/python/convert.c's rs_spawn_posix()).
Its parameters, by name and position, are ``dropin.cpython``'s
(``Internals.posix_spawn``); where the running CPython's ``_posix_spawn`` is
not the one known, CPython's own runs (glibc's posix_spawn, which never
copies the page tables).
"""
from __future__ import annotations

import subprocess
from typing import Any, Callable

from .._native import capi as _capi
from . import cpython as _cpython
from . import wrapping as _wrapping

__all__ = ["posix_spawn_method"]


def _bind(spawn: _cpython.PosixSpawn, self: Any, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The call as CPython's function would take it, positionally; a call it
    refuses gets its TypeError, in its words (Python's own, by the same name
    and parameters)."""
    global _binder
    if _binder is None or _binder[0] is not spawn:
        names = ", ".join(spawn.params)
        made: dict[str, Any] = {}
        exec(f"class Popen:\n def _posix_spawn(self, {names}):\n  return ({names},)\n",
             made)
        function = made["Popen"]._posix_spawn
        function.__defaults__ = spawn.function.__defaults__
        _binder = (spawn, function)
    return _binder[1](self, *args, **kwargs)


_binder: tuple[_cpython.PosixSpawn, Callable[..., tuple[Any, ...]]] | None = None


def posix_spawn_method(self: Any, *args: Any, **kwargs: Any) -> None:
    """``Popen._posix_spawn`` of the running CPython, on the engine."""
    # C keeps the conversion the first call hands it, once the gate passed.
    spawned = NotImplemented if kwargs else _capi.spawn_posix(args)
    if spawned is NotImplemented:  # the first call, or one by keyword or of another count
        spawn = _cpython.require().posix_spawn
        if spawn is None:  # not the _posix_spawn rdmaspawn knows: CPython's own
            spawn_cpython: Callable[..., None] = _wrapping.innermost(
                subprocess.Popen._posix_spawn)  # type: ignore[attr-defined]
            return spawn_cpython(self, *args, **kwargs)
        spawned = _capi.spawn_posix(_bind(spawn, self, args, kwargs), spawn.conversion)
    self.pid, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite = spawned
    self._child_created = True
    self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
