"""Thin binding over the C core: Python values in, exceptions out.

Mirrors the C names (``rs_spawn`` -> :func:`spawn`, ``rs_spawn_packed`` ->
:func:`spawn_packed`); libibverbs' fork status is :mod:`.forkstatus`'s.
Everything the child will read is validated and converted here, before the
clone: a bad argument never reaches the child.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._child import pack
from .._child.model import ChildSetup
from .._rdmaspawn_cffi import ffi, lib
from . import capi as _capi
from . import clonepath as _clonepath
from .request import (
    CLOSE_FDS,
    FORCE_CLONE,
    REAP_ON_FAILURE,
    RESTORE_SIGNALS,
    SETSID,
    WANT_PIDFD,
    SpawnRequest,
)

if TYPE_CHECKING:
    from .._rdmaspawn_cffi import CData  # the stub's name for a cffi value

# RDMASPAWN_CLONE=clone: every spawn of this process through glibc clone().
_clonepath.apply_variable(os.environ)

__all__ = [
    "SpawnError",
    "spawn",
    "spawn_request",
    "spawn_packed",
    "environ_snapshot",
    "clone_path",
]

_CLOSE_METHODS = {"auto": lib.RS_CLOSE_AUTO, "proc": lib.RS_CLOSE_PROC,
                  "loop": lib.RS_CLOSE_LOOP}


class SpawnError(OSError):
    """A spawn failed: ``errno`` says why, ``step`` where ("chdir", "execve", ...).

    ``pid`` is the pid of the child that failed when it was not reaped
    (``reap_on_failure=False``), else None.
    """

    errno: int
    step: str
    pid: int | None
    #: The step was the declarative setup's (csrc/setup.c), not the request's.
    in_setup: bool = False

    def __init__(self, err: int, step: str, filename: object = None,
                 pid: int | None = None) -> None:
        if filename is None:
            super().__init__(err, os.strerror(err))
        else:
            super().__init__(err, os.strerror(err), filename)
        self.step = step
        self.pid = pid

    def __str__(self) -> str:
        return f"{super().__str__()} (originated from {self.step}())"


#: os.fsencode()'s codec for a str (POSIX: the filesystem encoding, surrogateescape).
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def _fsencode(value: object) -> bytes:
    # Same rules as CPython's PyUnicode_FSConverter: str, bytes or PathLike,
    # and no NUL byte, which the child could not pass to the kernel.
    if isinstance(value, bytes):
        data = value
    else:
        data = os.fsencode(value)  # type: ignore[arg-type]
    if b"\0" in data:
        raise ValueError("embedded null byte")
    return data


def _blob(items: Sequence[object]) -> tuple[bytes, int]:
    """Strings as one blob of NUL-terminated strings, and their count.

    Converted as CPython's PyUnicode_FSConverter does; a NUL inside a string
    is found by counting the blob's NULs: one check instead of one per item.
    When something is wrong, the items are converted again one by one, so
    that the first bad one raises, as CPython's item-by-item conversion does.
    """
    try:
        # A str is encoded as os.fsencode() does it, without its Python frame.
        encoded = [item if type(item) is bytes
                   else item.encode(_FS_ENCODING, _FS_ERRORS) if type(item) is str
                   else os.fsencode(item)  # type: ignore[arg-type]
                   for item in items]
    except (TypeError, ValueError):
        encoded = None
    if encoded is not None:
        blob = b"\0".join(encoded)
        if blob.count(0) == max(len(encoded) - 1, 0):
            return blob + b"\0", len(encoded)
    for item in items:
        _fsencode(item)
    raise AssertionError("a bad item that converts cleanly on its own")  # cannot happen


_environ_array = _capi.environ_snapshot
_from_buffer = ffi.from_buffer


def environ_snapshot() -> Any:
    """A private copy of the environ array for a spawn with env=None, taken
    with the GIL held: the NULL-terminated array, as rs_spawn_packed's envp
    (see csrc/python/environ.c)."""
    return _from_buffer("char *[]", _environ_array())


def env_list(env: Mapping[object, object]) -> list[bytes]:
    """A mapping as ``KEY=VALUE`` bytes, checked as os.execve() and
    os.posix_spawn() check it: both converted, then a name that is empty or
    has "=" after its first byte refused (a leading "=" is allowed). Read as
    their parse_envlist reads it: keys(), then values(), so that a value
    that is no mapping fails with their message."""
    if not hasattr(type(env), "__getitem__"):
        raise TypeError("env must be a mapping object")
    out = []
    for key, value in zip(list(env.keys()), list(env.values())):
        k = _fsencode(key)
        v = _fsencode(value)
        if not k or b"=" in k[1:]:
            raise ValueError("illegal environment variable name")
        out.append(k + b"=" + v)
    return out


def _fd(value: object, what: str) -> int:
    # Any C int: a negative one other than -1 reaches the child, whose dup
    # fails with EBADF, as CPython's does.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise OverflowError(f"{what} out of range for a C int: {value}")
    return value


def _id(value: object, what: str) -> int:
    # Any uid_t: (uid_t)-1 reaches the kernel, which reads it as "unchanged"
    # for setres[ug]id and refuses it (EINVAL) in a group list.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"{what} out of range: {value}")
    return value


def spawn(
    argv: Sequence[object],
    exec_list: Sequence[object],
    env: Sequence[object] | None = None,
    cwd: object = None,
    stdin: int = -1,
    stdout: int = -1,
    stderr: int = -1,
    close_in_child: Sequence[int] = (),
    pass_fds: Sequence[int] = (),
    close_fds: bool = True,
    umask: int = -1,
    restore_signals: bool = True,
    setsid: bool = False,
    pgid: int = -1,
    gid: int | None = None,
    groups: Sequence[int] | None = None,
    uid: int | None = None,
    want_pidfd: bool = False,
    reap_on_failure: bool = True,
    fail_status: int = lib.RS_FAIL_STATUS_CPYTHON,
    close_method: str = "auto",
    force_clone: bool = False,
    setup: ChildSetup | None = None,
) -> tuple[int, int]:
    """Start a child and return ``(pid, pidfd)``; pidfd is -1 unless asked for.

    The child is created with CLONE_VM|CLONE_VFORK on a stack of its own: it
    never copies the parent's page tables, so MADV_DONTFORK memory cannot go
    missing in it. Raises :class:`SpawnError` (an OSError with the errno and
    the failed step) when the child could not be started or failed before
    execve() succeeded; the failed child is reaped unless
    ``reap_on_failure`` is false, in which case its pid is on the error.
    ``setup`` is the child's declarative setup (rlimits, death signal, ...:
    see :mod:`rdmaspawn.preexec`).
    """
    if close_method not in _CLOSE_METHODS:
        raise ValueError(f"close_method must be one of {sorted(_CLOSE_METHODS)}")
    fds = sorted({_fd(fd, "pass_fds item") for fd in pass_fds})
    if fds and fds[0] < 0:
        raise ValueError("bad value(s) in pass_fds")
    flags = ((close_fds and CLOSE_FDS) | (restore_signals and RESTORE_SIGNALS)
             | (setsid and SETSID) | (want_pidfd and WANT_PIDFD)
             | (reap_on_failure and REAP_ON_FAILURE) | (force_clone and FORCE_CLONE))
    return spawn_request(SpawnRequest(
        argv, exec_list, env, cwd, stdin, stdout, stderr, close_in_child, fds, flags,
        _CLOSE_METHODS[close_method], umask, pgid, groups, gid, uid, fail_status, setup))


#: csrc/python/spawn_request.c's spawn of a plain request (it reads
#: SpawnRequest's fields in their order: tests/test_spawn_request.py).
_spawn_plain_request = _capi.spawn_request_plain


def spawn_request(request: SpawnRequest) -> tuple[int, int]:
    """Start the child ``request`` describes; as :func:`spawn`. A request with
    declarative setup goes through :mod:`rdmaspawn._child.pack`, which packs
    the setup and calls :func:`spawn_packed` with it. A plain one (see
    csrc/python/spawn_request.c) is converted and spawned in C; anything
    else, bad values included, by :func:`spawn_packed`."""
    if request.setup is not None:
        return pack.spawn_with(request, spawn_packed)
    done = _spawn_plain_request(request)
    if done is not None:
        pid, pidfd, err, step, exec_index = done
        if err:
            raise _spawn_error(err, step, pid, exec_index, request.flags, request.cwd,
                               request.exec_list)
        return pid, pidfd
    return spawn_packed(request, ffi.NULL)


def spawn_packed(request: SpawnRequest, setup_ptr: Any) -> tuple[int, int]:
    """The one call of ``rs_spawn_packed()``: ``request`` as its flat
    arguments, ``setup_ptr`` the packed ``struct rs_setup *`` (or NULL)."""
    (argv, exec_list, env, cwd, stdin, stdout, stderr, close_in_child, pass_fds, flags,
     close_method, umask, pgid, groups, gid, uid, fail_status, _) = request
    argv_blob, argc = _blob(argv)
    exec_blob, nexec = _blob(exec_list)
    env_blob: bytes | CData
    if env is None:
        env_blob, nenv, envp = ffi.NULL, -1, environ_snapshot()  # nenv < 0: envp
    else:
        (env_blob, nenv), envp = _blob(env), ffi.NULL
    fds = list(pass_fds)
    closing = [_fd(fd, "fd") for fd in close_in_child if fd != -1]
    gids = [_id(g, "group") for g in groups] if groups is not None else []
    res = ffi.new("struct rs_result *")
    # One call; cffi passes bytes and lists as pointers valid for its length,
    # and releases the GIL for the whole spawn.
    lib.rs_spawn_packed(
        argv_blob, argc, exec_blob, nexec, env_blob, nenv, envp,
        _fsencode(cwd) if cwd is not None else ffi.NULL,
        fds or ffi.NULL, len(fds), closing or ffi.NULL, len(closing),
        _fd(stdin, "stdin"), _fd(stdout, "stdout"), _fd(stderr, "stderr"),
        flags, close_method, umask if umask >= 0 else -1,
        pgid if pgid is not None and pgid >= 0 else -1,
        gids or ffi.NULL, len(gids) if groups is not None else -1,
        _id(gid, "gid") if gid is not None else -1,
        _id(uid, "uid") if uid is not None else -1,
        fail_status, res, setup_ptr)
    if res.err:
        raise _spawn_error(res.err, res.step, res.pid, res.exec_index, flags, cwd, exec_list)
    return res.pid, res.pidfd


def _spawn_error(err: int, step: int, pid: int, exec_index: int, flags: int, cwd: object,
                 exec_list: Sequence[object]) -> SpawnError:
    """The SpawnError for a failed spawn: its ``struct rs_result``'s err,
    step, pid and exec_index, and the request's flags, cwd and exec_list."""
    error = SpawnError(err, ffi.string(lib.rs_step_name(step)).decode(),
                       cwd if step == lib.RS_STEP_CHDIR
                       # the path whose error this is
                       else exec_list[exec_index] if step == lib.RS_STEP_EXEC and len(exec_list) > 0
                       else None,
                       None if pid < 0 or flags & REAP_ON_FAILURE else pid)
    error.in_setup = step >= lib.RS_STEP_SIGACTION  # enum rs_step's setup part
    return error


def spawn_count() -> int:
    """How many spawns this process has asked the engine for, by any path
    (the C fork_exec, spawn_request, ...): what tests count routing with."""
    return int(lib.rs_spawn_count())


def clone_path() -> _clonepath.ClonePath:
    """Which system call starts this process's children (clone3 or clone), and why.

    Where no spawn has asked the kernel yet, one child is cloned to find out:
    it execs "/", which fails (EACCES), so no program runs.
    """
    if _clonepath.clone_path().method == "untried":
        try:
            pid, _ = spawn([b"/"], [b"/"])
            os.waitpid(pid, 0)  # pragma: no cover - execve("/") cannot succeed
        except SpawnError:
            pass
    return _clonepath.clone_path()
