"""A :class:`~rdmaspawn._child.model.ChildSetup` as ``struct rs_setup``, and the
spawn with it; the cgroup's fds are at 3 or above, which stdin/stdout/stderr
cannot clobber."""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from .._rdmaspawn_cffi import ffi, lib
from .model import ChildSetup, ioprio_value, signal_bits
from .spawner import run_as_process

T = TypeVar("T")

__all__ = ["ChildSetupError", "packed", "then"]


class ChildSetupError(OSError, subprocess.SubprocessError):
    """A step of the child's declarative setup failed (``step``: "setrlimit", ...).

    An OSError with the errno; also a SubprocessError, which is what CPython
    raises when a ``preexec_fn`` fails ("Exception occurred in preexec_fn.").
    """

    step: str
    pid: int | None

    def __str__(self) -> str:
        return f"{super().__str__()} (originated from {self.step}() in the child's setup)"


def _open_high(path: str, flags: int, fds: list[int]) -> int:
    fd = os.open(path, flags | os.O_CLOEXEC)
    if fd < 3:
        try:
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
        finally:
            os.close(fd)
        fd = high
    fds.append(fd)
    return fd


@contextlib.contextmanager
def packed(setup: ChildSetup, ids_change: bool = False) -> Iterator[Any]:
    """``struct rs_setup *`` for ``setup``, valid inside the block; with
    ``ids_change`` a preexec_fn's cgroup is joined as the new ids."""
    fds: list[int] = []
    try:
        s = ffi.new("struct rs_setup *")
        s.cgroup_fd = s.cgroup_procs_fd = -1
        if setup.os_setsid:
            s.session = lib.RS_SESSION_SETSID
        elif setup.setsid or setup.ctty is not None:
            s.session = lib.RS_SESSION_NEW
        if setup.pgid is not None:
            s.set_pgid, s.pgid = 1, setup.pgid
        procs_path = None
        if setup.cgroup is not None and ids_change and not setup.privileged_first:
            # A preexec_fn's: joined as the new user, as under CPython.
            procs_path = ffi.new("char[]", os.fsencode(os.path.join(setup.cgroup,
                                                                    "cgroup.procs")))
            s.cgroup_procs_path = procs_path
        elif setup.cgroup is not None:  # the directory is for CLONE_INTO_CGROUP
            s.cgroup_fd = _open_high(setup.cgroup, os.O_RDONLY | os.O_DIRECTORY, fds)
            s.cgroup_procs_fd = _open_high(os.path.join(setup.cgroup, "cgroup.procs"),
                                           os.O_WRONLY, fds)
        s.early_after_ids = int(not setup.privileged_first)
        s.ctty_fd = -1 if setup.ctty is None else setup.ctty
        limits = ffi.new("struct rs_rlimit[]", [list(item) for item in setup.rlimits])
        s.rlimits = limits
        s.n_rlimits = len(setup.rlimits)
        if setup.nice is not None:
            s.set_nice, s.nice = 1, setup.nice
        if setup.ioprio is not None:
            s.set_ioprio = 1
            s.ioprio = ioprio_value(setup.ioprio)
        words = None
        if setup.cpu_affinity is not None:
            mask = [0] * (max(setup.cpu_affinity) // 64 + 1)
            for cpu in setup.cpu_affinity:
                mask[cpu // 64] |= 1 << (cpu % 64)
            words = ffi.new("unsigned long long[]", mask)
            s.cpu_mask = words
            s.cpu_mask_bytes = 8 * len(mask)
        s.ignore_signals = signal_bits(setup.ignore_signals)
        s.default_signals = signal_bits(setup.default_signals - setup.ignore_signals)
        if setup.signal_mask is not None:
            s.set_signal_mask = 1
            s.signal_mask = signal_bits(setup.signal_mask)
        s.no_new_privs = int(setup.no_new_privs)
        if setup.pdeathsig is not None:
            s.pdeathsig = setup.pdeathsig
            s.parent_pid = os.getpid()
        yield s
        del limits, words, procs_path  # kept alive until the child has exec'd
    finally:
        for fd in fds:
            os.close(fd)


def _dispose(spawned: Any) -> None:
    # A child whose caller was interrupted before it could own it: its pid,
    # or (pid, pidfd).
    pid, pidfd = spawned if isinstance(spawned, tuple) else (spawned, -1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    if pidfd >= 0:
        os.close(pidfd)


def then(setup: ChildSetup, uid: object, gid: object, groups: object,
         no_id: tuple[object, ...] = (None,)) -> Callable[[Callable[[int], T]], T]:
    """The C converter's ``then`` for a request it has converted:
    ``then(spawn)`` calls ``spawn(address)`` with ``setup`` packed at
    ``address``, a preexec_fn's cgroup joined as the new ids where ``uid`` or
    ``gid`` (not in ``no_id``) or ``groups`` changes them. The caller makes
    the setup's umask the request's; the setup's session and group come after
    the request's, as CPython calls preexec_fn after start_new_session=."""
    ids_change = uid not in no_id or gid not in no_id or groups is not None
    return lambda spawn: _spawn_with(setup, ids_change, spawn)


def _spawn_with(setup: ChildSetup, ids_change: bool, spawn: Callable[[int], T]) -> T:
    if (setup.pdeathsig is not None and setup.signal_mask is None
            and threading.current_thread() is not threading.main_thread()):
        # The spawner thread's mask is not the caller's: send the caller's.
        current = signal.pthread_sigmask(signal.SIG_BLOCK, ())
        setup = setup._replace(signal_mask=frozenset(int(s) for s in current))
    with packed(setup, ids_change) as ptr:
        address = int(ffi.cast("uintptr_t", ptr))

        def call() -> T:
            return spawn(address)
        try:
            if setup.pdeathsig is None:
                return call()
            return run_as_process(call, _dispose)  # type: ignore[no-any-return]
        except OSError as err:
            # The setup's failure is CPython's "Exception occurred in
            # preexec_fn."; the request's (start_new_session=, cwd=, ...) is
            # the OSError CPython gives for it.
            if not getattr(err, "in_setup", False):
                raise
            step = getattr(err, "step", "")
            filename = err.filename
            if step == "cgroup":
                filename = os.path.join(str(setup.cgroup), "cgroup.procs")
            errno = err.errno or 0
            error = ChildSetupError(errno, os.strerror(errno), filename)
            error.step = step
            error.pid = getattr(err, "pid", None)
            raise error from None
