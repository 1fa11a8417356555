"""The error pipe of ``Popen._execute_child``, kept in memory.

CPython's ``_execute_child`` makes a pipe on every spawn for one purpose: a
child that fails before ``execve`` writes what failed into it ("OSError:2:"),
and the parent reads it once the child has exec'd or died. Its four system
calls (pipe2, two closes and a read) are a large share of what the parent
spends per spawn (docs/benchmark.md). The engine's child never writes it: it reports through shared
memory, and ``fork_exec`` writes the pipe in the parent for it. So
rdmaspawn.Popen, and CPython's Popen under ``patch()``, run CPython's
``_execute_child`` recompiled to call :data:`CALLS` instead of ``os``'s
pipe, read and close for that pipe only (``dropin/execute_child.py``), and
``fork_exec`` hands a failed child's report to :func:`write`. The pipe is
kept here only for a call of rdmaspawn's own ``fork_exec``; any other gets
a real one.

Each pipe here is a pair of numbers at or above :data:`FIRST_FD`, which
Linux gives no descriptor unless ``fs.nr_open`` and ``RLIMIT_NOFILE`` were
both raised past 2**30 (the default cap is 2**20); every function takes a
number below it for a real descriptor and passes it to ``os``. Where such a
pair must reach CPython's own ``fork_exec`` (a ``preexec_fn`` that needs
fork), :func:`call_with_real_pipe` gives it a real pipe and keeps what came
through. A child is never given one of these numbers: ``fork_exec`` drops
the write end from the fds it keeps, and closes only real descriptors.
"""
from __future__ import annotations

import errno
import os
from typing import Any, Callable

from .._native import capi as _capi
from .._startup.markers import GUARD_WRAPPER

__all__ = ["FIRST_FD", "CALLS", "write", "is_memory", "call_with_real_pipe"]

#: The lowest number of a pipe kept here (its read end; the write end is the
#: next number).
FIRST_FD = 1 << 30

#: Each open pipe by its read end: what was written and not yet read, or the
#: exception that stopped :func:`call_with_real_pipe`'s read, for the read
#: of it to raise where CPython's os.read() would have.
_pipes: dict[int, bytes | BaseException] = {}

#: ``(pipe, read, close)``: ``os.pipe()``, ``os.read(fd, n)`` and
#: ``os.close(fd)`` for these pipes, in C (csrc/python/errpipe.c: once per
#: spawn each). ``pipe(fork_exec)`` is given the fork_exec the method will
#: call, and keeps the pipe here only where that is rdmaspawn's (through
#: rdmaspawn's guard's wrappers at most): anything else gets a real pipe.
#: It returns ``(read end, write end, fork_exec)``, and the method calls that
#: fork_exec, the one the pipe suits.
CALLS: tuple[Callable[[Any], tuple[int, int, Any]], Callable[[int, int], bytes],
             Callable[[int], None]] = _capi.errpipe_calls(_pipes, os, FIRST_FD, GUARD_WRAPPER)


def is_memory(fd: int) -> bool:
    """Whether ``fd`` is one end of a pipe kept here."""
    return fd >= FIRST_FD


def write(fd: int, data: bytes) -> int:
    """``os.write()``: a failed child's report, into the pipe whose write end is ``fd``."""
    if fd < FIRST_FD:
        return os.write(fd, data)
    held = _pipes.get(fd - 1)
    if not isinstance(held, bytes):
        raise OSError(errno.EPIPE, os.strerror(errno.EPIPE))  # its read end is closed
    _pipes[fd - 1] = held + data
    return len(data)


def call_with_real_pipe(fork_exec: Callable[..., int], args: tuple[Any, ...],
                        params: tuple[str, ...]) -> int:
    """``fork_exec(*args)`` where CPython's child needs a real error pipe.

    ``args`` name a pipe kept here (``params`` says where each argument
    sits). The call gets a real pipe in its place, and what the child writes
    into it is read here, until the child has exec'd or exited (as CPython's
    ``_execute_child`` reads it), and kept for :func:`read`.
    """
    i_read, i_write = params.index("errpipe_read"), params.index("errpipe_write")
    i_keep = params.index("fds_to_keep")
    held, held_write = args[i_read], args[i_write]
    real_read, real_write = os.pipe()
    low = []
    while real_write < 3:  # as _execute_child: fork_exec refuses 0, 1 and 2
        low.append(real_write)
        real_write = os.dup(real_write)
    for fd in low:
        os.close(fd)
    call = list(args)
    call[i_read], call[i_write] = real_read, real_write
    call[i_keep] = tuple(sorted({fd for fd in args[i_keep] if fd != held_write} | {real_write}))
    try:
        try:
            pid = fork_exec(*call)
        finally:
            os.close(real_write)
        data = b""
        try:
            while True:
                part = os.read(real_read, 50000)
                data += part
                if not part or len(data) > 50000:
                    break
        except BaseException as exc:  # noqa: BLE001 - raised by read(), where CPython raises it
            _pipes[held] = exc
        else:
            _pipes[held] = data
    finally:
        os.close(real_read)
    return pid
