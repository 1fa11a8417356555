"""Thin binding over the C core (``rs_spawn`` -> :func:`spawn`): Python values in,
exceptions out; csrc/python/convert.c checks every argument before the clone."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

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

# RDMASPAWN_CLONE=clone: every spawn of this process through glibc clone().
_clonepath.apply_variable(os.environ)

__all__ = [
    "SpawnError",
    "spawn",
    "spawn_request",
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


def _fsencode(value: object) -> bytes:
    # PyUnicode_FSConverter's rules: str, bytes or PathLike, and no NUL byte,
    # which the child could not pass to the kernel.
    data = value if isinstance(value, bytes) else os.fsencode(value)  # type: ignore[arg-type]
    if b"\0" in data:
        raise ValueError("embedded null byte")
    return data


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
    see :mod:`rdmaspawn.preexec`). The flags (``close_fds`` to
    ``force_clone``) are taken by truth, as subprocess takes ``close_fds``:
    None is false.
    """
    if close_method not in _CLOSE_METHODS:
        raise ValueError(f"close_method must be one of {sorted(_CLOSE_METHODS)}")
    fds = sorted(set(pass_fds))
    # Each by its truth, spelled out: a generator here costs a tenth of a spawn.
    flags = ((CLOSE_FDS if close_fds else 0) | (RESTORE_SIGNALS if restore_signals else 0)
             | (SETSID if setsid else 0) | (WANT_PIDFD if want_pidfd else 0)
             | (REAP_ON_FAILURE if reap_on_failure else 0) | (FORCE_CLONE if force_clone else 0))
    return spawn_request(SpawnRequest(
        argv, exec_list, env, cwd, stdin, stdout, stderr, close_in_child, fds, flags,
        _CLOSE_METHODS[close_method], umask, pgid, groups, gid, uid, fail_status, setup))


def spawn_request(request: SpawnRequest) -> tuple[int, int]:
    """Start the child ``request`` describes, as :func:`spawn`; its setup is
    packed once the request is converted, so that a bad argument is raised
    first, as CPython raises it before any preexec_fn runs."""
    setup = request.setup
    if setup is not None and setup.umask is not None:  # the last set wins; it cannot fail
        request = request._replace(umask=setup.umask)
    return _capi.spawn_request(request, None if setup is None else pack.then(
        setup, request.uid, request.gid, request.groups))


def _spawn_error(err: int, step: int, pid: int, exec_index: int, flags: int, cwd: object,
                 exec_list: Sequence[object]) -> SpawnError:
    error = SpawnError(err, ffi.string(lib.rs_step_name(step)).decode(),
                       cwd if step == lib.RS_STEP_CHDIR
                       # the path whose error this is
                       else exec_list[exec_index] if step == lib.RS_STEP_EXEC and len(exec_list) > 0
                       else None,
                       None if pid < 0 or flags & REAP_ON_FAILURE else pid)
    error.in_setup = step >= lib.RS_STEP_SIGACTION  # enum rs_step's setup part
    return error


_capi.set_spawn_error(_spawn_error)


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
