"""A :class:`~rdmaspawn._setup.ChildSetup` as ``struct rs_setup``, and the spawn with it.

Everything the child will read is made here, in the parent: the limit and
CPU arrays, the signal masks, and the cgroup's fds (opened O_CLOEXEC, at 3
or above so that installing stdin/stdout/stderr cannot clobber them, and
closed again once the spawn returns).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any, Callable

from ._rdmaspawn_cffi import ffi, lib
from ._setup import ChildSetup, ioprio_value, signal_bits
from ._spawner import run_as_process

__all__ = ["ChildSetupError", "packed", "spawn_with"]


class ChildSetupError(OSError, subprocess.SubprocessError):
    """A step of the child's declarative setup failed (``step``: "setrlimit", ...).

    An OSError with the errno; also a SubprocessError, which is what CPython
    raises when a ``preexec_fn`` fails ("Exception occurred in preexec_fn.").
    """

    step: str
    pid: int | None

    def __str__(self) -> str:
        return f"{super().__str__()} (originated from {self.step}() in the child's setup)"


def _setup_steps() -> frozenset[str]:
    names = (ffi.string(lib.rs_step_name(step)).decode()
             for step in range(lib.RS_STEP_SIGACTION, lib.RS_STEP_PDEATHSIG + 1))
    return frozenset(names)


_SETUP_STEPS = _setup_steps()


def _open_high(path: str, flags: int) -> int:
    fd = os.open(path, flags | os.O_CLOEXEC)
    if fd < 3:
        try:
            return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
        finally:
            os.close(fd)
    return fd


def _open_cgroup(path: str, fds: list[int]) -> tuple[int, int]:
    """The cgroup directory (for CLONE_INTO_CGROUP) and its cgroup.procs.

    A path that is no cgroup fails here with an OSError naming it.
    """
    directory = _open_high(path, os.O_RDONLY | os.O_DIRECTORY)
    fds.append(directory)
    procs = _open_high(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
    fds.append(procs)
    return directory, procs


@contextlib.contextmanager
def packed(setup: ChildSetup, ids_change: bool = False) -> Iterator[Any]:
    """``struct rs_setup *`` for ``setup``, valid inside the block.

    ``ids_change``: the request changes user, group or groups, which a
    preexec_fn's cgroup must be joined as (not by clone3, as the parent).
    """
    fds: list[int] = []
    try:
        s = ffi.new("struct rs_setup *")
        s.cgroup_fd = s.cgroup_procs_fd = -1
        procs_path = None
        if setup.cgroup is not None and ids_change and not setup.privileged_first:
            # A preexec_fn's: joined as the new user, as under CPython.
            procs_path = ffi.new("char[]", os.fsencode(os.path.join(setup.cgroup,
                                                                    "cgroup.procs")))
            s.cgroup_procs_path = procs_path
        elif setup.cgroup is not None:
            s.cgroup_fd, s.cgroup_procs_fd = _open_cgroup(setup.cgroup, fds)
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


def _dispose(spawned: tuple[int, int]) -> None:
    # A child whose caller was interrupted before it could own it.
    pid, pidfd = spawned
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    if pidfd >= 0:
        os.close(pidfd)


def spawn_with(setup: ChildSetup, spawn_flat: Callable[..., tuple[int, int]],
               argv: Any, exec_list: Any, env: Any, cwd: Any, stdin: int, stdout: int,
               stderr: int, close_in_child: Any, pass_fds: Any, flags: int,
               close_method: int, umask: int, pgid: int | None, groups: Any,
               gid: int | None, uid: int | None, fail_status: int) -> tuple[int, int]:
    """``spawn_flat`` with ``setup`` carried out in the child.

    The setup's session, process group and umask become the request's; a
    death signal makes the spawn follow the process (see ``_spawner``).
    """
    # The request's steps that only the setup asked for: their failure is the
    # setup's (CPython: "Exception occurred in preexec_fn."), not the
    # OSError that a failed start_new_session= or process_group= gives.
    steps = set(_SETUP_STEPS)
    if (setup.setsid or setup.ctty is not None) and not flags & lib.RS_F_SETSID:
        flags |= lib.RS_F_SETSID
        steps.add("setsid")
    if setup.umask is not None:
        umask = setup.umask
    if setup.pgid is not None:
        if pgid is None or pgid < 0:
            steps.add("setpgid")
        pgid = setup.pgid
    if (setup.pdeathsig is not None and setup.signal_mask is None
            and threading.current_thread() is not threading.main_thread()):
        # The spawner thread's mask is not the caller's: send the caller's.
        current = signal.pthread_sigmask(signal.SIG_BLOCK, ())
        setup = setup._replace(signal_mask=frozenset(int(s) for s in current))
    ids_change = uid is not None or gid is not None or groups is not None
    with packed(setup, ids_change) as ptr:
        def call() -> tuple[int, int]:
            return spawn_flat(argv, exec_list, env, cwd, stdin, stdout, stderr,
                              close_in_child, pass_fds, flags, close_method, umask, pgid,
                              groups, gid, uid, fail_status, _setup_ptr=ptr)
        try:
            if setup.pdeathsig is None:
                return call()
            return run_as_process(call, _dispose)  # type: ignore[no-any-return]
        except OSError as err:
            step = getattr(err, "step", None)
            if step not in steps:
                raise
            filename = err.filename
            if step == "cgroup":
                filename = os.path.join(str(setup.cgroup), "cgroup.procs")
            errno = err.errno or 0
            error = ChildSetupError(errno, os.strerror(errno), filename)
            error.step = step
            error.pid = getattr(err, "pid", None)
            raise error from None
