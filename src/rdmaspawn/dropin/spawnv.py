"""``os.spawn*`` on the engine, for ``patch()``.

``os.spawnv`` and its siblings fork() and exec in the child, exiting with
127 when exec fails. This does the same without fork(): the same inherited
fds (no closing), the same signal dispositions, the same 127.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional, Sequence

from .. import _engine

__all__ = ["spawnvef"]


def spawnvef(mode: int, file: Any, args: Sequence[Any],
             env: Optional[Mapping[Any, Any]], func: Callable[..., Any]) -> int:
    """Replacement for ``os._spawnvef`` (behind every ``os.spawn*``)."""
    if not isinstance(args, (tuple, list)):
        raise TypeError("spawnv() arg 2 must be a tuple or list")
    if not args:
        raise ValueError("spawnv() arg 2 cannot be empty")
    searching = func in (os.execvp, os.execvpe)
    if searching and not os.path.dirname(os.fsencode(file)):
        exec_list = [os.path.join(os.fsencode(d), os.fsencode(file))
                     for d in os.get_exec_path(env)]
    else:
        exec_list = [file]
    env_list = _engine.env_list(env) if func in (os.execve, os.execvpe) and env is not None else None
    try:
        pid, _ = _engine.spawn(args, exec_list, env=env_list, close_fds=False,
                               restore_signals=False, reap_on_failure=False,
                               fail_status=127)
    except _engine.SpawnError as err:
        if err.pid is None:
            raise OSError(err.errno, os.strerror(err.errno)) from None
        pid = err.pid  # exited with 127, as a forked child would have
    if mode == os.P_NOWAIT:
        return pid
    while True:
        _, status = os.waitpid(pid, 0)
        if os.WIFSTOPPED(status):
            continue
        return os.waitstatus_to_exitcode(status)
