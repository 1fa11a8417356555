"""CPython's argument conversions for the spawn primitives, with CPython's errors.

``_posixsubprocess.fork_exec`` and ``os.posix_spawn`` convert and check
their arguments in C before they fork; each bad value raises a particular
exception with a particular message, and the first bad argument in their
order wins. The drop-ins check in the same order with the same exceptions,
so that a bad request fails under rdmaspawn exactly as it fails without it.
Which messages a version uses is the version table's (``cpython``).
"""
from __future__ import annotations

import errno
import os
from typing import Any

from .._native import engine as _engine
from . import cpython as _cpython

__all__ = ["posix_spawn_args"]

def posix_spawn_args(path: Any, argv: Any, env: Any, fds: tuple[int, ...],
                     str_nul: str) -> list[bytes] | None:
    """os.posix_spawn's checks of its path, argv, env and file-action fds, in
    its order; returns the environment as ``KEY=VALUE`` bytes (None: inherit)."""
    if b"\0" in (path if isinstance(path, bytes) else os.fsencode(path)):
        raise ValueError(str_nul if isinstance(path, str) else _cpython.POSIX_SPAWN_PATH_NUL)
    if not isinstance(argv, (list, tuple)):
        raise TypeError("posix_spawn: argv must be a tuple or list")
    if not argv:
        raise ValueError("posix_spawn: argv must not be empty")
    first = argv[0] if type(argv[0]) is bytes else os.fsencode(argv[0])
    for item in argv:
        _engine._fsencode(item)
    if not first:
        raise ValueError("posix_spawn: argv first element cannot be empty")
    env_list = None if env is None else _engine.env_list(env)
    # Each file action is parsed (PyArg_ParseTuple "i") then added; glibc's
    # posix_spawn_file_actions_add*() refuses an fd outside [0, the fd
    # limit) with EBADF there, before any child: an OSError with no filename.
    limit = os.sysconf("SC_OPEN_MAX") if fds else 0  # a system call: only when needed
    for fd in fds:
        if not 0 <= _cpython.c_int(fd, "format_i") < limit:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
    return env_list
