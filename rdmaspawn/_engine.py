"""Thin binding over the C core: Python values in, exceptions out.

Mirrors the C names (``rs_spawn`` -> :func:`spawn`, ``rs_fork_init`` ->
:func:`fork_init`). Everything the child will read is validated and converted
here, before the clone: a bad argument never reaches the child.
"""
from __future__ import annotations

import errno as _errno
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Callable, NamedTuple

from . import _clonepath, _setup_pack
from ._rdmaspawn_cffi import ffi, lib
from ._setup import ChildSetup

# RDMASPAWN_CLONE=clone: every spawn of this process through glibc clone().
_clonepath.apply_variable(os.environ)

__all__ = [
    "SpawnError",
    "ForkInitError",
    "ForkStatus",
    "spawn",
    "fork_init",
    "fork_status",
    "clone_path",
]

# The flags of spawn_flat(), for its callers (the C enum rs_flags is their
# one definition).
CLOSE_FDS: int = lib.RS_F_CLOSE_FDS
RESTORE_SIGNALS: int = lib.RS_F_RESTORE_SIGNALS
SETSID: int = lib.RS_F_SETSID
WANT_PIDFD: int = lib.RS_F_WANT_PIDFD
REAP_ON_FAILURE: int = lib.RS_F_REAP_ON_FAILURE
FORCE_CLONE: int = lib.RS_F_FORCE_CLONE

_CLOSE_METHODS = {"auto": lib.RS_CLOSE_AUTO, "proc": lib.RS_CLOSE_PROC,
                  "loop": lib.RS_CLOSE_LOOP}
_STATES = {
    lib.RS_FORK_UNAVAILABLE: "unavailable",
    lib.RS_FORK_DISABLED: "disabled",
    lib.RS_FORK_ENABLED: "enabled",
    lib.RS_FORK_UNNEEDED: "unneeded",
}


class SpawnError(OSError):
    """A spawn failed: ``errno`` says why, ``step`` where ("chdir", "execve", ...).

    ``pid`` is the pid of the child that failed when it was not reaped
    (``reap_on_failure=False``), else None.
    """

    errno: int
    step: str
    pid: int | None

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


class ForkInitError(OSError):
    """ibv_fork_init() failed; for EINVAL, memory was registered before it."""


class ForkStatus(NamedTuple):
    """libibverbs fork protection: ``state`` and the library that was asked.

    state is one of "unavailable" (no libibverbs), "disabled" (ibv_fork_init
    has not run: nothing is marked), "enabled" (registrations are marked
    MADV_DONTFORK), "unneeded" (the kernel copies pinned pages at fork and the
    library marks nothing). The state says what the library does, not only
    what ``ibv_is_fork_initialized()`` answers: rdma-core 35-50 answer
    "unneeded" on a copy-on-fork kernel and still mark once fork protection
    is on, and that is "enabled" here (see csrc/forkinit.c).
    """

    state: str
    library: str | None


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
        encoded = [item if type(item) is bytes else os.fsencode(item)  # type: ignore[arg-type]
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


class _EnvironCopier:
    """csrc/environ.c's rs_environ_copy(), called with the GIL held.

    The child must see what a CPython child sees with ``env=None``: the C
    ``environ`` (which os.putenv() changes without os.environ). But the
    spawn runs with the GIL released, while another thread's os.environ
    update (setenv/unsetenv) may reallocate and free that array: handing it
    to the child gave EFAULT or heap bytes as environment. Python code only
    changes it with the GIL held, and ctypes.PyDLL keeps the GIL for the
    call, so the copy is consistent; the C loop costs a third of walking the
    array from Python through cffi. One buffer per thread, grown as needed.
    """

    def __init__(self) -> None:
        import ctypes

        from ._capi import pydll

        dll = pydll()
        if dll is None:
            raise OSError("ctypes cannot load the module")
        function = dll.rs_environ_copy
        function.restype = ctypes.c_long
        function.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.POINTER(ctypes.c_int)]
        self._copy = function
        self._ctypes = ctypes
        self._local = threading.local()

    def __call__(self) -> tuple[bytes, int]:
        ctypes, local = self._ctypes, self._local
        count = ctypes.c_int()
        buf = getattr(local, "buf", None)
        cap = 0 if buf is None else len(buf)
        while True:
            need = self._copy(buf, cap, ctypes.byref(count))
            if need <= cap:
                return ctypes.string_at(buf, need) + b"\0", count.value
            cap = need * 2
            buf = local.buf = ctypes.create_string_buffer(cap)


def _environ_blob_cffi() -> tuple[bytes, int]:
    """The same copy walked from Python, where ctypes cannot be loaded (a
    process that dropped the privileges to read its own install, say).
    Reading a cffi global and indexing it never releases the GIL."""
    env = lib.environ
    if env == ffi.NULL:  # after clearenv()
        return b"\0", 0
    entries: list[bytes] = []
    append, string = entries.append, ffi.string   # the hot loop, as locals
    i = 0
    entry = env[0]
    while entry:  # a NULL pointer is false
        append(string(entry))
        i += 1
        entry = env[i]
    return b"\0".join(entries) + b"\0", i


_environ_copy: Callable[[], tuple[bytes, int]] | None = None


def _environ_blob() -> tuple[bytes, int]:
    """A private copy of the C environment, as a blob and its count (see
    :class:`_EnvironCopier`)."""
    global _environ_copy
    if _environ_copy is None:
        try:
            _environ_copy = _EnvironCopier()
        except (ImportError, OSError, AttributeError):
            _environ_copy = _environ_blob_cffi
    return _environ_copy()


def env_list(env: Mapping[object, object]) -> list[bytes]:
    """A mapping as ``KEY=VALUE`` bytes, checked as os.execve() and
    os.posix_spawn() check it: both converted, then a name that is empty or
    has "=" after its first byte refused (a leading "=" is allowed)."""
    out = []
    for key, value in env.items():
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
    fail_status: int = 255,
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
    return spawn_flat(argv, exec_list, env, cwd, stdin, stdout, stderr, close_in_child,
                      fds, flags, _CLOSE_METHODS[close_method], umask, pgid, groups,
                      gid, uid, fail_status, setup)


def spawn_flat(argv: Sequence[object], exec_list: Sequence[object],
               env: Sequence[object] | None, cwd: object, stdin: int, stdout: int,
               stderr: int, close_in_child: Sequence[int], pass_fds: Sequence[int],
               flags: int, close_method: int, umask: int, pgid: int | None,
               groups: Sequence[int] | None, gid: int | None, uid: int | None,
               fail_status: int, setup: ChildSetup | None = None,
               _setup_ptr: Any = None) -> tuple[int, int]:
    """:func:`spawn` with positional arguments, the flags already combined
    (``CLOSE_FDS | RESTORE_SIGNALS | ...``) and ``pass_fds`` already checked:
    ascending, unique, non-negative ints. The hot path of ``fork_exec``, whose
    caller (CPython's ``_execute_child``) hands it exactly that."""
    if setup is not None:
        return _setup_pack.spawn_with(
            setup, _spawn_flat, argv, exec_list, env, cwd, stdin, stdout, stderr,
            close_in_child, pass_fds, flags, close_method, umask, pgid, groups, gid, uid,
            fail_status)
    argv_blob, argc = _blob(argv)
    exec_blob, nexec = _blob(exec_list)
    env_blob, nenv = _blob(env) if env is not None else _environ_blob()
    fds = list(pass_fds)
    closing = [_fd(fd, "fd") for fd in close_in_child if fd != -1]
    gids = [_id(g, "group") for g in groups] if groups is not None else []
    res = ffi.new("struct rs_result *")
    # One call; cffi passes bytes and lists as pointers valid for its length,
    # and releases the GIL for the whole spawn.
    lib.rs_spawn_packed(
        argv_blob, argc, exec_blob, nexec, env_blob, nenv,
        _fsencode(cwd) if cwd is not None else ffi.NULL,
        fds or ffi.NULL, len(fds), closing or ffi.NULL, len(closing),
        _fd(stdin, "stdin"), _fd(stdout, "stdout"), _fd(stderr, "stderr"),
        flags, close_method, umask if umask >= 0 else -1,
        pgid if pgid is not None and pgid >= 0 else -1,
        gids or ffi.NULL, len(gids) if groups is not None else -1,
        _id(gid, "gid") if gid is not None else -1,
        _id(uid, "uid") if uid is not None else -1,
        fail_status, res, ffi.NULL if _setup_ptr is None else _setup_ptr)
    if res.err:
        step = ffi.string(lib.rs_step_name(res.step)).decode()
        pid = None if res.pid < 0 or flags & REAP_ON_FAILURE else res.pid
        filename = None
        if res.step == lib.RS_STEP_CHDIR:
            filename = cwd
        elif res.step == lib.RS_STEP_EXEC and len(exec_list) > 0:
            filename = exec_list[res.exec_index]  # the path whose error this is
        raise SpawnError(res.err, step, filename, pid)
    return res.pid, res.pidfd


_spawn_flat = spawn_flat  # the setup path's way back in, whatever replaces the name


def spawn_count() -> int:
    """How many spawns this process has asked the engine for, by any path
    (the C fork_exec, spawn_flat, ...): what tests count routing with."""
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


def _status(call: str) -> tuple[int, str | None, int]:
    path = ffi.new("char[]", 4096)
    err = ffi.new("int *")
    if call == "init":
        state = lib.rs_fork_init(path, 4096, err)
    else:
        state = lib.rs_fork_status(path, 4096)
    library = ffi.string(path).decode(errors="surrogateescape") or None
    return state, library, err[0]


def fork_status() -> ForkStatus:
    """Report libibverbs' fork protection for this process (see :class:`ForkStatus`)."""
    state, library, _ = _status("status")
    return ForkStatus(_STATES[state], library)


def fork_init() -> ForkStatus:
    """Turn on libibverbs' fork protection, correctly.

    Asks the libibverbs instance the process already has loaded (the one
    NCCL, pyverbs or UCX registered memory with), else loads the system's.
    Does nothing when there is no libibverbs ("unavailable") or when the
    kernel copies pinned pages at fork ("unneeded"), and nothing more once
    enabled: calling it again is harmless. Raises :class:`ForkInitError` when
    ibv_fork_init() fails; EINVAL means memory was registered before the call.
    """
    state, library, err = _status("init")
    if err == _errno.EINVAL:
        raise ForkInitError(
            err,
            "ibv_fork_init() refused: memory was already registered with "
            f"libibverbs ({library}) before fork protection was turned on. "
            "Call rdmaspawn.fork_init() before any memory registration (before "
            "NCCL, UCX or pyverbs open a device), or set RDMAV_FORK_SAFE=1 in "
            "the environment before the process starts",
        )
    if err:
        raise ForkInitError(err, f"ibv_fork_init() failed: {os.strerror(err)}")
    return ForkStatus(_STATES[state], library)
