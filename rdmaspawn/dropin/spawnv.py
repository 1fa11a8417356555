"""``os.spawn*`` on the engine, for ``patch()``.

``os.spawnv`` and its siblings fork() and exec in the child, exiting with
127 when exec fails. This does the same without fork(): the same inherited
fds (no closing), the same signal dispositions, the same 127.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Callable

from .._native import engine as _engine

__all__ = ["spawnvef"]


def spawnvef(mode: int, file: Any, args: Sequence[Any],
             env: Mapping[Any, Any] | None, func: Callable[..., Any]) -> int:
    """Replacement for ``os._spawnvef`` (behind every ``os.spawn*``)."""
    # os._spawnvef's own checks, in the parent; its messages.
    if not isinstance(args, (tuple, list)):
        raise TypeError("argv must be a tuple or a list")
    if not args or not args[0]:
        raise ValueError("argv first element cannot be empty")
    try:
        pid = _start(file, args, env, func)
    except _engine.SpawnError as err:
        pid = _started(err)
    except Exception:  # noqa: BLE001 - CPython's child catches every one
        # Anything the conversion raises (a NUL, an int path, a bad env, a
        # __fspath__ that raises, an OSError) CPython raises in its forked
        # child, which then exits with 127: start a child that does just
        # that (an empty exec list fails at once).
        pid = _start_failed()
    if mode == os.P_NOWAIT:
        return pid
    while True:
        _, status = os.waitpid(pid, 0)
        if os.WIFSTOPPED(status):
            continue
        return os.waitstatus_to_exitcode(status)


def _start(file: Any, args: Sequence[Any], env: Mapping[Any, Any] | None,
           func: Callable[..., Any]) -> int:
    searching = func in (os.execvp, os.execvpe)
    if searching and not os.path.dirname(os.fsencode(file)):
        exec_list = [os.path.join(os.fsencode(d), os.fsencode(file))
                     for d in os.get_exec_path(env)]
    else:
        exec_list = [file]
    # CPython's child calls func(file, args) when env is None, else
    # func(file, args, env): a mismatch is a TypeError there, then 127.
    if (func in (os.execve, os.execvpe)) != (env is not None):
        raise TypeError(f"{func.__name__}() called with the wrong arguments")
    if env is not None and not isinstance(env, Mapping):
        raise TypeError("env must be a mapping object")  # os.execve's check
    env_list = None if env is None else _engine.env_list(env)
    return _spawn(args, exec_list, env_list)


def _start_failed() -> int:
    try:
        return _spawn([b"-"], [], None)
    except _engine.SpawnError as err:
        return _started(err)


def _started(err: _engine.SpawnError) -> int:
    """The child that failed before exec (it exited with 127, as a forked
    child would have); with none, the OSError of a failed fork()."""
    if err.pid is None:
        raise OSError(err.errno, os.strerror(err.errno)) from None
    return err.pid


def _spawn(argv: Sequence[Any], exec_list: Sequence[Any], env_list: list[bytes] | None) -> int:
    pid, _ = _engine.spawn(argv, exec_list, env=env_list, close_fds=False,
                           restore_signals=False, reap_on_failure=False, fail_status=127)
    return pid
