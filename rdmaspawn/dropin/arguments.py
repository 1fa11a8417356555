"""CPython's argument conversions for the spawn primitives, with CPython's errors.

``_posixsubprocess.fork_exec`` and ``os.posix_spawn`` convert and check
their arguments in C before they fork; each bad value raises a particular
exception with a particular message, and the first bad argument in their
order wins. The drop-ins check in the same order with the same exceptions,
so that a bad request fails under rdmaspawn exactly as it fails without it.
Which messages a version uses is the version table's (``_cpython``).
"""
from __future__ import annotations

import errno
import operator
import os
from typing import Any

from .. import _cpython, _engine

__all__ = [
    "check_fds_to_keep",
    "check_strings",
    "convert_groups",
    "convert_id",
    "posix_spawn_args",
]

# CPython's MAX_GROUPS: NGROUPS_MAX of <limits.h> (Linux: 65536).
_MAX_GROUPS = 65536
_UID_T_MAX = 0xFFFFFFFF
_LONG_MAX = 0x7FFFFFFFFFFFFFFF


def convert_id(value: Any, what: str) -> int | None:
    """A uid or gid as ``_Py_Uid_Converter`` converts it; None: leave it alone.

    -1 and (uid_t)-1 change nothing. A value that fits a C long but not a
    uid_t is "less than minimum" there (its truncation check shares the
    negative case's label), one beyond a C long "greater than maximum".
    """
    if value is None:
        return None
    value = operator.index(value)
    if value in (-1, _UID_T_MAX):
        return None
    if 0 <= value < _UID_T_MAX:
        return int(value)
    if value > _LONG_MAX:
        raise OverflowError(f"{what} is greater than maximum")
    raise OverflowError(f"{what} is less than minimum")


def convert_groups(groups: Any, too_many: str) -> list[int] | None:
    """fork_exec's ``extra_groups``: a list of gids; (gid_t)-1 goes to the
    kernel, which refuses it in the child (EINVAL), as with CPython."""
    if groups is None:
        return None
    if not isinstance(groups, list):
        raise TypeError("setgroups argument must be a list")
    if len(groups) > _MAX_GROUPS:
        raise ValueError(too_many)
    out = []
    for gid in groups:
        if not isinstance(gid, int):
            raise TypeError("extra_groups must be integers")
        if gid == -1:
            gid = _UID_T_MAX
        elif not 0 <= gid <= _UID_T_MAX:
            raise ValueError("invalid group id")
        out.append(int(gid))
    return out


def check_fds_to_keep(fds_to_keep: Any) -> None:
    """fork_exec's sanity check of its sorted tuple of fds to keep."""
    if not isinstance(fds_to_keep, tuple):
        raise ValueError("bad value(s) in fds_to_keep")
    prev = -1
    for fd in fds_to_keep:
        if not isinstance(fd, int) or fd < 0 or fd <= prev or fd > 0x7FFFFFFF:
            raise ValueError("bad value(s) in fds_to_keep")
        prev = fd


def check_strings(call: _cpython.ForkExecCall) -> None:
    """Raise what fork_exec raises for its strings, in its order (executable
    list, argv, env, cwd), before it looks at the ids."""
    _engine._blob(call.executable_list)
    if call.args is not None:
        _engine._blob(call.args)
    if call.env_list is not None:
        _engine._blob(call.env_list)
    if call.cwd is not None:
        _engine._fsencode(call.cwd)


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
    _engine._blob(argv)
    if not first:
        raise ValueError("posix_spawn: argv first element cannot be empty")
    env_list = None if env is None else _engine.env_list(env)
    # Each file action is parsed (PyArg_ParseTuple "i") then added; glibc's
    # posix_spawn_file_actions_add*() refuses an fd outside [0, the fd
    # limit) with EBADF there, before any child: an OSError with no filename.
    limit = os.sysconf("SC_OPEN_MAX")
    for fd in fds:
        if not 0 <= _cpython.c_int(fd, "format_i") < limit:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
    return env_list
