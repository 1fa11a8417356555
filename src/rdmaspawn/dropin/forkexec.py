"""A drop-in for ``_posixsubprocess.fork_exec`` built on the engine.

CPython's ``Popen._execute_child`` (and multiprocessing's
``util.spawnv_passfds``) start every child through this one primitive. This
version takes the same arguments and, on a failure in the child, writes into
``errpipe_write`` exactly what CPython's child would have written, so that
``_execute_child`` raises the same exception, with the same errno and
filename, as it does without rdmaspawn.
"""
from __future__ import annotations

import os
import subprocess
from typing import Any, Callable

from .. import _cpython, _engine, _wrapping
from .._procfs import has_dontfork
from . import arguments

__all__ = ["PreexecFnError", "make_fork_exec", "fork_exec"]

_CLOSE_AUTO = 0  # rs_close_method: close_range, else /proc, else a loop

_REPLACEMENTS = (
    "cwd= instead of os.chdir(), umask= instead of os.umask(), "
    "start_new_session=True instead of os.setsid(), process_group= (3.11+) "
    "instead of os.setpgid(), user=/group=/extra_groups= instead of os.setuid()/os.setgid()/"
    "os.setgroups(), pass_fds=/close_fds= for file descriptors, "
    "restore_signals= for SIGPIPE/SIGXFSZ, env= for the environment; for "
    "resource limits, nice or CPU affinity, run the command through "
    "prlimit(1), nice(1) or taskset(1)"
)


class PreexecFnError(subprocess.SubprocessError, RuntimeError):
    """preexec_fn was given in a process where fork() would crash the child."""


def _refuse_preexec_fn() -> None:
    raise PreexecFnError(
        "preexec_fn needs fork(), and this process holds MADV_DONTFORK memory "
        "(RDMA-registered buffers: see /proc/self/smaps, VmFlags 'dc'): pages "
        "that fork() leaves out of the child can hold malloc or Python state, "
        "and the child would crash before exec. rdmaspawn starts children "
        "without fork(), where no Python code can run before exec. Use the "
        "declarative arguments instead: " + _REPLACEMENTS + "."
    )


def _error_bytes(err: _engine.SpawnError, chdir_tag: bytes) -> bytes:
    if err.step == "execve":
        tag = b""
    elif err.step == "chdir":
        tag = chdir_tag
    else:
        tag = b"noexec"
    return b"OSError:%x:%s" % (err.errno, tag)


def make_fork_exec(fallback: Callable[..., int]) -> Callable[..., int]:
    """Build a ``fork_exec`` whose preexec_fn path goes to ``fallback``.

    ``fallback`` is CPython's own fork_exec (or whatever stood in its place);
    it is kept on ``__wrapped__`` and looked up there at each call, so that a
    wrapper applied later can be taken out of the chain again.
    """

    def fork_exec(*args: Any) -> int:
        internals = _cpython.require()
        call = _cpython.unpack_fork_exec(args)
        if call.preexec_fn is not None:
            if has_dontfork():
                _refuse_preexec_fn()
            # No DONTFORK memory: fork() is safe, and only it can run Python
            # code in the child. Behave exactly as CPython does.
            return fork_exec.__wrapped__(*args)  # type: ignore[attr-defined, no-any-return]

        # Convert and check as fork_exec does, in its order: the ints as it
        # parses its arguments, then its preconditions, strings, ids.
        c_int, parser = _cpython.c_int, internals.int_parser
        (p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, errpipe_read,
         errpipe_write) = (c_int(fd, parser) for fd in call[6:14])
        pgid = c_int(call.pgid_to_set, parser)
        umask = c_int(call.child_umask, parser)
        if call.close_fds and errpipe_write < 3:
            raise ValueError("errpipe_write must be >= 3")
        arguments.check_fds_to_keep(call.fds_to_keep)
        # The error pipe stays with the parent: the engine's child reports
        # through shared memory and this function writes the pipe itself.
        keep = [fd for fd in call.fds_to_keep if fd != errpipe_write]
        flags = ((call.close_fds and _engine.CLOSE_FDS)
                 | (call.restore_signals and _engine.RESTORE_SIGNALS)
                 | (call.call_setsid and _engine.SETSID))
        try:
            groups = arguments.convert_groups(call.extra_groups, internals.too_many_groups)
            gid = arguments.convert_id(call.gid, "gid")
            uid = arguments.convert_id(call.uid, "uid")
            pid, _ = _engine.spawn_flat(
                call.args, call.executable_list, call.env_list, call.cwd, p2cread, c2pwrite,
                errwrite, (p2cwrite, c2pread, errread, errpipe_read), keep, flags,
                _CLOSE_AUTO, umask, pgid, groups, gid, uid, 255)
        except _engine.SpawnError as err:
            if err.pid is None:
                # No child: CPython raises from the failed fork() itself.
                raise OSError(err.errno, os.strerror(err.errno)) from None
            # The caller reads the pipe and reaps the child, as with CPython;
            # a caller that closed its end (BrokenPipeError) still gets the
            # pid, which it alone can reap.
            try:
                os.write(errpipe_write, _error_bytes(err, internals.chdir_tag))
            except OSError:
                pass
            return err.pid
        except (TypeError, ValueError, OverflowError):
            # fork_exec converts its strings first, in its own order: their
            # errors win over the ids' and the engine's.
            arguments.check_strings(call)
            raise
        return pid

    fork_exec.__wrapped__ = fallback  # type: ignore[attr-defined]
    fork_exec.__rdmaspawn__ = True  # type: ignore[attr-defined]
    return fork_exec


def _cpython_fork_exec() -> Callable[..., int]:
    import _posixsubprocess

    # Under patch() or guard() the module attribute may be a wrapper.
    return _wrapping.innermost(_posixsubprocess.fork_exec)  # type: ignore[no-any-return]


#: The engine-based fork_exec used by rdmaspawn.Popen.
fork_exec: Callable[..., int] = make_fork_exec(_cpython_fork_exec())
