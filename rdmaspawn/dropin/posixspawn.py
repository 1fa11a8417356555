"""A drop-in for ``Popen._posix_spawn`` built on the engine.

For simple requests CPython's ``_execute_child`` takes a shortcut through
``os.posix_spawn()`` (3.9-3.12: with ``close_fds=False``; 3.13: also with
``close_fds=True`` where ``POSIX_SPAWN_CLOSEFROM`` exists). That path has its
own rules: the environment comes from ``os.environ`` (3.9-3.12), and every
failure, in the child or not, is an ``OSError`` naming the executable. This
replacement starts the child with the engine and keeps those rules, so that
each request behaves as it does in CPython on the path CPython would take.
Its parameters, by name and position, are ``dropin.cpython``'s
(``Internals.posix_spawn``); where the running CPython's ``_posix_spawn`` is
not the one known, CPython's own runs (glibc's posix_spawn, which never
copies the page tables).
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import Any, Callable

from .._native import capi as _capi
from .._native import engine as _engine
from .._native import request as _request
from . import arguments
from . import cpython as _cpython
from . import wrapping as _wrapping

__all__ = ["posix_spawn_method"]

def _bind(spawn: _cpython.PosixSpawn, args: tuple[Any, ...], kwargs: dict[str, Any]
          ) -> dict[str, Any]:
    """The call's arguments by parameter name, as CPython's function would take them."""
    params = spawn.params
    if not kwargs and len(args) == len(params):  # how _execute_child calls it
        return dict(zip(params, args))
    if len(args) > len(params):
        raise TypeError(f"_posix_spawn() takes {len(params) + 1} positional arguments "
                        f"but {len(args) + 1} were given")
    bound = dict(zip(params, args))
    for name, value in kwargs.items():
        if name not in params or name in bound:
            raise TypeError(f"_posix_spawn() got an unexpected or repeated argument {name!r}")
        bound[name] = value
    for name in params:
        if name not in bound:
            if name not in spawn.defaults:
                raise TypeError(f"_posix_spawn() missing required argument {name!r}")
            bound[name] = spawn.defaults[name]
    return bound


def posix_spawn_method(self: Any, *args: Any, **kwargs: Any) -> None:
    """``Popen._posix_spawn`` of the running CPython, on the engine."""
    internals = _cpython.require()
    spawn = internals.posix_spawn
    if spawn is None:  # not the _posix_spawn rdmaspawn knows: CPython's own
        spawn_cpython: Callable[..., None] = _wrapping.innermost(
            subprocess.Popen._posix_spawn)  # type: ignore[attr-defined]
        return spawn_cpython(self, *args, **kwargs)
    if not kwargs and not internals.posix_spawn_environ:
        # Popen(argv) on 3.13+: what the general path below does, without its
        # conversions, where the call is plain (env None, no fds, str or bytes
        # strings that pass posix_spawn's checks); any other goes on below.
        pid = _capi.spawn_posix_plain(args, spawn.positions)
        if pid is not None:
            self.pid = pid
            self._child_created = True
            self._close_pipe_fds(-1, -1, -1, -1, -1, -1)
            return
    a = _bind(spawn, args, kwargs)
    env: Mapping[Any, Any] | None = a["env"]
    if env is None and internals.posix_spawn_environ:
        env = os.environ
    executable = a["executable"]
    # The file actions' fds: closes first, then dup2s, as _posix_spawn lists them.
    fds = tuple(fd for fd in (a["p2cwrite"], a["c2pread"], a["errread"], a["p2cread"],
                              a["c2pwrite"], a["errwrite"]) if fd != -1)
    env_list = arguments.posix_spawn_args(executable, a["args"], env, fds,
                                          internals.posix_spawn_str_nul)
    # By their truth, in _posix_spawn's order, as its ifs take them.
    flags = ((_request.RESTORE_SIGNALS if a["restore_signals"] else 0)
             | (_request.CLOSE_FDS if a.get("close_fds", False) else 0)
             | _request.REAP_ON_FAILURE)
    try:
        pid, _ = _engine.spawn_request(_request.SpawnRequest(
            a["args"], [executable], env_list, None, a["p2cread"], a["c2pwrite"],
            a["errwrite"], (a["p2cwrite"], a["c2pread"], a["errread"]), (), flags))
    except _engine.SpawnError as err:
        # posix_spawn() reports every failure as an error on its path.
        raise OSError(err.errno, os.strerror(err.errno), executable) from None
    self.pid = pid
    self._child_created = True
    self._close_pipe_fds(a["p2cread"], a["p2cwrite"], a["c2pread"], a["c2pwrite"],
                         a["errread"], a["errwrite"])
