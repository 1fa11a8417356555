"""Become a command as a shell would start it: ``run``'s exec.

Three things tell ``os.execvpe`` from a shell apart, and each is undone here:
the signals CPython ignores at start-up (SIGPIPE, SIGXFSZ), which an exec
keeps ignored, go back to SIG_DFL, so ``yes | head -c1`` ends ``yes``; the
command gets the environment this process was started with
(``/proc/self/environ``), not what CPython's start-up changed (PEP 538's
``LC_CTYPE``); and a script without ``#!`` (ENOEXEC) is run by /bin/sh, as
execvp() does.
"""
from __future__ import annotations

import errno
import os
import signal
from collections.abc import Mapping, Sequence
from typing import NoReturn

from .._host.processinfo import read_environ

__all__ = ["initial_environ", "exec_as_shell"]

#: The shell a file without ``#!`` is handed to (execvp's _PATH_BSHELL).
SHELL = "/bin/sh"

#: What CPython's start-up ignores (Python/pylifecycle.c, signal_install_handlers).
_PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)


def initial_environ() -> dict[str, str]:
    """The environment this process was exec'd with (os.environ where /proc
    cannot tell: it has what the start-up changed)."""
    try:
        return read_environ("self")
    except OSError:
        return dict(os.environ)


def exec_as_shell(command: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process by ``command`` (searched in PATH); raises the
    OSError os.execvpe would when it cannot be started."""
    for signum in _PYTHON_IGNORES:
        signal.signal(signum, signal.SIG_DFL)
    argv = list(command)
    first_error: OSError | None = None
    last_error: OSError | None = None
    # execvp's search: a name with a slash is used as is.
    name = argv[0]
    for path in [name] if "/" in name else [os.path.join(d, name) for d in os.get_exec_path(env)]:
        try:
            os.execve(path, argv, env)
        except OSError as exc:
            if exc.errno == errno.ENOEXEC:
                os.execve(SHELL, [SHELL, path, *argv[1:]], env)
            # As os.execvpe: the first error that is not "not here" wins.
            if first_error is None and exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                first_error = exc
            last_error = exc
    raise first_error or last_error or FileNotFoundError(errno.ENOENT, "No such file or directory",
                                                        argv[0])
