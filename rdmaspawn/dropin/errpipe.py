"""The error pipe of ``Popen._execute_child``, kept in memory: its four system
calls are a large share of a spawn (docs/benchmark.md), and the engine's child
reports through shared memory instead (``dropin/execute_child.py`` makes the
method call :data:`CALLS`; ``fork_exec`` hands a failed child's report to
:func:`write`).

A pipe here is a pair of numbers at or above :data:`FIRST_FD`, which Linux
gives no descriptor unless ``fs.nr_open`` and ``RLIMIT_NOFILE`` were raised
past 2**30; a lower number is a real descriptor. Any ``fork_exec`` not ours
gets a real pipe (:func:`call_with_real_pipe`): no child is given these numbers.
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

#: ``(pipe, read, close)`` for these pipes, in C (csrc/python/errpipe.c).
#: ``pipe(fork_exec)`` keeps the pipe here only where that fork_exec is
#: rdmaspawn's, and returns ``(read end, write end, fork_exec)``: the method
#: calls the fork_exec the pipe suits.
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
    """``fork_exec(*args)`` with a real pipe for the one kept here that
    ``args`` name; what the child writes is read, as CPython reads it, and kept."""
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
