"""``pty_spawn()``: a program on a new pseudo-terminal, without fork.

What ``pty.fork()`` followed by an exec gives (the child leads a new
session whose controlling terminal is the pty, which is its stdin, stdout
and stderr), done by the engine: the child is created with CLONE_VM and
takes the terminal with setsid() and TIOCSCTTY before it execs, so a process
holding MADV_DONTFORK memory can start terminal programs.
"""
from __future__ import annotations

import fcntl
import os
import struct
import termios
from collections.abc import Mapping, Sequence
from typing import Any

from . import _engine
from ._setup import ChildSetup, build, merge

__all__ = ["pty_spawn"]


def _exec_list(argv0: bytes, env: Mapping[Any, Any] | None) -> list[bytes]:
    # os.execvp's search: a name with a slash is used as is.
    if b"/" in argv0:
        return [argv0]
    return [os.path.join(os.fsencode(d), argv0) for d in os.get_exec_path(env)]


def pty_spawn(
    argv: Sequence[Any] | str | bytes | os.PathLike[Any],
    *,
    env: Mapping[Any, Any] | None = None,
    cwd: Any = None,
    pass_fds: Sequence[int] = (),
    winsize: tuple[int, int] | None = None,
    preexec: ChildSetup | None = None,
) -> tuple[int, int]:
    """Start ``argv`` (searched in PATH) on a new pty; return ``(pid, master_fd)``.

    The child is a session leader with the pty as controlling terminal and
    as fds 0, 1 and 2. ``winsize`` is ``(rows, columns)``; ``preexec`` is a
    :mod:`rdmaspawn.preexec` setup to apply as well. The caller reads and
    writes ``master_fd``, closes it, and reaps ``pid`` (``os.waitpid``).
    Raises the ``OSError`` subclass ``subprocess`` would (FileNotFoundError,
    ...) when the program cannot be started; a failed setup step raises
    :class:`rdmaspawn.ChildSetupError`. A str (bytes, path) ``argv`` is one
    program without arguments, as for ``pty.spawn``.
    """
    # A str is one program, not a sequence of one-letter names.
    args: Sequence[Any] = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else argv
    if not args:
        raise ValueError("argv must not be empty")
    setup = build(ctty=0)
    if preexec is not None:
        setup = merge(preexec, setup)
    master, slave = os.openpty()  # both O_CLOEXEC
    try:
        if winsize is not None:
            rows, cols = winsize
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        pid, _ = _engine.spawn(
            args, _exec_list(os.fsencode(args[0]), env),
            env=None if env is None else _engine.env_list(env), cwd=cwd,
            stdin=slave, stdout=slave, stderr=slave, pass_fds=pass_fds, setup=setup)
    except _engine.SpawnError as err:
        os.close(master)
        if err.step in ("execve", "chdir"):
            # As subprocess raises it: FileNotFoundError, PermissionError, ...,
            # naming the program as given (err.filename is the path tried).
            name = args[0] if err.step == "execve" else err.filename
            raise OSError(err.errno, os.strerror(err.errno), name) from None
        raise
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return pid, master
