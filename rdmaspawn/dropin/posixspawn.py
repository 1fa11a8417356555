"""A drop-in for ``Popen._posix_spawn`` built on the engine.

For simple requests CPython's ``_execute_child`` takes a shortcut through
``os.posix_spawn()`` (3.9-3.12: with ``close_fds=False``; 3.13: also with
``close_fds=True`` where ``POSIX_SPAWN_CLOSEFROM`` exists). That path has its
own rules: the environment comes from ``os.environ`` (3.9-3.12), and every
failure, in the child or not, is an ``OSError`` naming the executable. This
replacement starts the child with the engine and keeps those rules, so that
each request behaves as it does in CPython on the path CPython would take.
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

# The running CPython's parameters of _posix_spawn (they differ by version:
# 3.13 added close_fds), read from its code object: inspect.signature()
# would import inspect, ~15 ms of every interpreter's start-up under RDMASPAWN.
# CPython's own, below any wrapper (RDMASPAWN's start-up stand-in, say).
_CPYTHON = _wrapping.innermost(subprocess.Popen._posix_spawn)  # type: ignore[attr-defined]
_PARAMETERS: tuple[str, ...] = _CPYTHON.__code__.co_varnames[:_CPYTHON.__code__.co_argcount]
_DEFAULTS: dict[str, Any] = dict(zip(reversed(_PARAMETERS), reversed(_CPYTHON.__defaults__ or ())))


def _bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name, as CPython's function would take them."""
    if not kwargs and len(args) == len(_PARAMETERS):  # how _execute_child calls it
        return dict(zip(_PARAMETERS, args))
    if len(args) > len(_PARAMETERS):
        raise TypeError(f"_posix_spawn() takes {len(_PARAMETERS)} positional arguments "
                        f"but {len(args)} were given")
    bound = dict(zip(_PARAMETERS, args))
    for name, value in kwargs.items():
        if name not in _PARAMETERS or name in bound:
            raise TypeError(f"_posix_spawn() got an unexpected or repeated argument {name!r}")
        bound[name] = value
    for name in _PARAMETERS:
        if name not in bound:
            if name not in _DEFAULTS:
                raise TypeError(f"_posix_spawn() missing required argument {name!r}")
            bound[name] = _DEFAULTS[name]
    return bound


# Where each parameter sits in CPython's positional call (self not counted),
# for the plain case below.
_AT = {name: i - 1 for i, name in enumerate(_PARAMETERS)}
_FD_PARAMS = tuple(_AT[name] for name in ("p2cread", "p2cwrite", "c2pread", "c2pwrite",
                                           "errread", "errwrite"))
# The same for csrc/python/posix_spawn.c, a byte each: the call's length, then
# args, executable, env, restore_signals, close_fds (0xff: not a parameter
# before 3.13) and the six fds.
_POSITIONS = bytes((len(_PARAMETERS) - 1, _AT["args"], _AT["executable"], _AT["env"],
                    _AT["restore_signals"], _AT.get("close_fds", 0xFF), *_FD_PARAMS))


def _plain(args: tuple[Any, ...]) -> tuple[bytes, int, bytes] | None:
    """``(argv blob, argc, executable)`` where the call is the plain one CPython
    makes for ``Popen(argv)`` (positional, env None, no pipes, str or bytes
    strings that pass posix_spawn's checks); else None, and the general path
    sees the call afresh (and raises what posix_spawn raises)."""
    if len(args) != len(_AT) - 1 or args[_AT["env"]] is not None:
        return None
    for i in _FD_PARAMS:
        if args[i] != -1:
            return None
    argv, executable = args[_AT["args"]], args[_AT["executable"]]
    if type(argv) is not list and type(argv) is not tuple:
        return None
    if type(executable) is str:
        executable = os.fsencode(executable)
    elif type(executable) is not bytes:
        return None
    try:
        blob, argc = _engine._blob(argv)
    except (TypeError, ValueError):
        return None
    if not argc or blob[0] == 0 or b"\0" in executable:  # empty argv, or its argv[0]
        return None
    return blob, argc, executable


def _spawn_plain_python(args: tuple[Any, ...], positions: bytes) -> int | None:
    """csrc/python/posix_spawn.c's ``spawn_posix_plain`` in Python, where
    ctypes cannot load the module: the plain call spawned (its pid), else
    None. ``positions`` is the C one's; ``_AT`` says the same here."""
    plain = _plain(args)
    if plain is None:
        return None
    close_fds = "close_fds" in _AT and args[_AT["close_fds"]]  # a parameter since 3.13
    flags = ((_request.RESTORE_SIGNALS if args[_AT["restore_signals"]] else 0)
             | (_request.CLOSE_FDS if close_fds else 0)
             | _request.REAP_ON_FAILURE)
    try:
        pid, _ = _engine.spawn_plain(*plain, flags)
    except _engine.SpawnError as err:
        raise OSError(err.errno, os.strerror(err.errno), args[_AT["executable"]]) from None
    return pid


#: The plain call spawned, ``(args, positions) -> pid or None``: in C where
#: ctypes loads the module (the whole call with the GIL held but for the
#: spawn; issue 29: parent CPU), else in Python.
_spawn_plain: Callable[[tuple[Any, ...], bytes], int | None] = \
    _spawn_plain_python if _capi.spawn_posix_plain is None else _capi.spawn_posix_plain


def posix_spawn_method(self: Any, *args: Any, **kwargs: Any) -> None:
    """``Popen._posix_spawn`` of the running CPython, on the engine."""
    internals = _cpython.require()
    if not kwargs and not internals.posix_spawn_environ:
        # Popen(argv) on 3.13+: what the general path below does, without its
        # conversions, where the call is plain (env None, no fds, str or bytes
        # strings that pass posix_spawn's checks); any other goes on below.
        pid = _spawn_plain(args, _POSITIONS)
        if pid is not None:
            self.pid = pid
            self._child_created = True
            self._close_pipe_fds(-1, -1, -1, -1, -1, -1)
            return
    a = _bind((self, *args), kwargs)
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
