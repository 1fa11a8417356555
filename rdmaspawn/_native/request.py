"""The spawn request: the Python side's one list of what a spawn asks of the
engine (csrc/python/convert.c alone converts it)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .._child.model import ChildSetup
from .._rdmaspawn_cffi import lib

__all__ = ["SpawnRequest", "CLOSE_FDS", "RESTORE_SIGNALS", "SETSID", "WANT_PIDFD",
           "REAP_ON_FAILURE", "FORCE_CLONE"]

# SpawnRequest.flags (the C enum rs_flags is their one definition).
CLOSE_FDS: int = lib.RS_F_CLOSE_FDS
RESTORE_SIGNALS: int = lib.RS_F_RESTORE_SIGNALS
SETSID: int = lib.RS_F_SETSID
WANT_PIDFD: int = lib.RS_F_WANT_PIDFD
REAP_ON_FAILURE: int = lib.RS_F_REAP_ON_FAILURE
FORCE_CLONE: int = lib.RS_F_FORCE_CLONE


class SpawnRequest(NamedTuple):
    """One spawn; the defaults are a plain spawn's.

    ``pass_fds`` is ascending, unique and non-negative (engine.spawn() checks
    it; CPython's ``_execute_child`` hands fork_exec exactly that); ``flags``
    combines :data:`CLOSE_FDS`, :data:`RESTORE_SIGNALS`, ...; ``close_method``
    is a ``RS_CLOSE_*``; ``env`` None hands the child a copy of the C
    environment (csrc/python/environ.c); ``fail_status`` is the exit
    status of a child that failed before exec (CPython's by default).
    """

    argv: Sequence[object]
    exec_list: Sequence[object]
    env: Sequence[object] | None = None
    cwd: object = None
    stdin: int = -1
    stdout: int = -1
    stderr: int = -1
    close_in_child: Sequence[int] = ()
    pass_fds: Sequence[int] = ()
    flags: int = CLOSE_FDS | RESTORE_SIGNALS | REAP_ON_FAILURE
    close_method: int = lib.RS_CLOSE_AUTO
    umask: int = -1
    pgid: int | None = -1
    groups: Sequence[int] | None = None
    gid: int | None = None
    uid: int | None = None
    fail_status: int = lib.RS_FAIL_STATUS_CPYTHON
    setup: ChildSetup | None = None
