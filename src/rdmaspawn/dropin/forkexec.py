"""A drop-in for ``_posixsubprocess.fork_exec`` built on the engine.

CPython's ``Popen._execute_child`` (and multiprocessing's
``util.spawnv_passfds``) start every child through this one primitive. This
version takes the same arguments and, on a failure in the child, writes into
``errpipe_write`` exactly what CPython's child would have written, so that
``_execute_child`` raises the same exception, with the same errno and
filename, as it does without rdmaspawn.
"""
from __future__ import annotations

import operator
import os
import subprocess
import sys
from typing import Any, Callable, Optional

from .. import _engine
from .._procfs import has_dontfork
from .._setup_pack import ChildSetupError
from . import childsetup as _childsetup

__all__ = ["PreexecFnError", "make_fork_exec", "fork_exec"]

_CLOSE_AUTO = 0  # rs_close_method: close_range, else /proc, else a loop

# 3.11 added process_group (pgid_to_set) and allow_vfork.
_NARGS = 23 if sys.version_info >= (3, 11) else 21

# 3.13 tells a failed chdir() apart from other failures before exec.
_CHDIR_TAG = (
    b"noexec:chdir"
    if "noexec:chdir" in vars(subprocess.Popen)["_execute_child"].__code__.co_consts
    else b"noexec"
)

# What to use instead of a preexec_fn, one line each (PreexecFnError's message).
_REPLACEMENTS = (
    ("os.chdir(path)", "cwd=path"),
    ("os.umask(mask)", "umask=mask"),
    ("os.setsid()", "start_new_session=True"),
    *((("os.setpgid(0, pgid)", "process_group=pgid"),) if _NARGS == 23 else ()),
    ("os.setuid/setgid/setgroups", "user=, group=, extra_groups="),
    ("closing or keeping fds", "close_fds=, pass_fds="),
    ("SIGPIPE/SIGXFSZ back to default", "restore_signals=True"),
    ("os.environ changes", "env="),
    ("resource.setrlimit(res, (soft, hard))", "rdmaspawn.preexec.rlimit(res, soft, hard)"),
    ("os.nice(n)", "rdmaspawn.preexec.nice(n)"),
    ("os.sched_setaffinity(0, cpus)", "rdmaspawn.preexec.cpu_affinity(cpus)"),
    ("prctl(PR_SET_PDEATHSIG, sig)", "rdmaspawn.preexec.pdeathsig(sig)"),
    ("prctl(PR_SET_NO_NEW_PRIVS)", "rdmaspawn.preexec.no_new_privs()"),
    ("signal.signal(sig, SIG_IGN/SIG_DFL)",
     "rdmaspawn.preexec.ignore_signals(sig) / default_signals(sig)"),
    ("a controlling terminal (pty)", "rdmaspawn.pty_spawn(argv)"),
    ("several of these", "rdmaspawn.preexec.chain(a, b, ...)"),
)


class PreexecFnError(subprocess.SubprocessError, RuntimeError):
    """preexec_fn was given in a process where fork() would crash the child."""


def _refuse_preexec_fn() -> None:
    width = max(len(old) for old, _ in _REPLACEMENTS)
    lines = "\n".join(f"  {old:<{width}}  ->  {new}" for old, new in _REPLACEMENTS)
    raise PreexecFnError(
        "preexec_fn needs fork(), and this process holds "
        "MADV_DONTFORK (RDMA) memory\n"
        "A forked child misses those pages and can crash before exec.\n"
        "Use what rdmaspawn runs without fork (docs/preexec.md):\n" + lines
    )


def _error_bytes(err: _engine.SpawnError) -> bytes:
    if err.step == "execve":
        tag = b""
    elif err.step == "chdir":
        tag = _CHDIR_TAG
    else:
        tag = b"noexec"
    return b"OSError:%x:%s" % (err.errno, tag)


def _convert_id(value: Any, what: str) -> Optional[int]:
    """A uid or gid as CPython's fork_exec converts it; None: leave it alone.

    Like ``_Py_Uid_Converter``: -1 and (uid_t)-1 (0xFFFFFFFF) are accepted
    and change nothing in the child, other out-of-range values raise
    OverflowError in the parent, as test_subprocess's test_user/test_group
    check with ``user=2**64``.
    """
    if value is None:
        return None
    value = operator.index(value)
    if value == -1 or value == 0xFFFFFFFF:
        return None
    if value < 0:
        raise OverflowError(f"{what} is less than minimum")
    if value > 0xFFFFFFFF:
        raise OverflowError(f"{what} is greater than maximum")
    return int(value)


def _check_fds_to_keep(fds_to_keep: Any) -> None:
    # The same sanity check CPython makes before it forks.
    if not isinstance(fds_to_keep, tuple):
        raise ValueError("bad value(s) in fds_to_keep")
    prev = -1
    for fd in fds_to_keep:
        if not isinstance(fd, int) or fd < 0 or fd <= prev or fd > 0x7FFFFFFF:
            raise ValueError("bad value(s) in fds_to_keep")
        prev = fd


def make_fork_exec(fallback: Callable[..., int]) -> Callable[..., int]:
    """Build a ``fork_exec`` whose preexec_fn path goes to ``fallback``.

    ``fallback`` is CPython's own fork_exec (or whatever stood in its place);
    it is kept on ``__wrapped__`` and looked up there at each call, so that a
    wrapper applied later can be taken out of the chain again.
    """

    def fork_exec(*args: Any) -> int:
        if len(args) != _NARGS:
            raise TypeError(
                f"fork_exec() takes exactly {_NARGS} arguments ({len(args)} given)")
        if _NARGS == 23:
            (argv, exec_list, close_fds, fds_to_keep, cwd, env_list,
             p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
             errpipe_read, errpipe_write, restore_signals, call_setsid,
             pgid_to_set, gid, extra_groups, uid, child_umask, preexec_fn,
             _allow_vfork) = args
        else:
            (argv, exec_list, close_fds, fds_to_keep, cwd, env_list,
             p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
             errpipe_read, errpipe_write, restore_signals, call_setsid,
             gid, extra_groups, uid, child_umask, preexec_fn) = args
            pgid_to_set = -1

        setup = None
        if preexec_fn is not None:
            # rdmaspawn.preexec helpers and the common stdlib values run in
            # the CLONE_VM child without fork (childsetup's table).
            setup = _childsetup.as_setup(preexec_fn)
        if preexec_fn is not None and setup is None:
            if has_dontfork():
                _refuse_preexec_fn()
            # No DONTFORK memory: fork() is safe, and only it can run Python
            # code in the child. Behave exactly as CPython does.
            return fork_exec.__wrapped__(*args)  # type: ignore[attr-defined, no-any-return]

        if close_fds and errpipe_write < 3:
            raise ValueError("errpipe_write must be >= 3")
        _check_fds_to_keep(fds_to_keep)
        gid = _convert_id(gid, "gid")
        uid = _convert_id(uid, "uid")
        # The error pipe stays with the parent: the engine's child reports
        # through shared memory and this function writes the pipe itself.
        keep = [fd for fd in fds_to_keep if fd != errpipe_write]
        flags = ((close_fds and _engine.CLOSE_FDS)
                 | (restore_signals and _engine.RESTORE_SIGNALS)
                 | (call_setsid and _engine.SETSID))
        want_pidfd = _childsetup.pidfd_requested()
        if want_pidfd:
            flags |= _engine.WANT_PIDFD
        try:
            pid, pidfd = _engine.spawn_flat(
                argv, exec_list, env_list, cwd, p2cread, c2pwrite, errwrite,
                (p2cwrite, c2pread, errread, errpipe_read), keep, flags, _CLOSE_AUTO,
                child_umask, pgid_to_set, extra_groups, gid, uid, 255,
                **({"setup": setup} if setup is not None else {}))
        except ChildSetupError as err:
            # Raised here, as a failed fork() is: the caller closes the pipes.
            if err.pid is not None:
                os.waitpid(err.pid, 0)
                err.pid = None
            raise
        except _engine.SpawnError as err:
            if err.pid is None:
                # No child: CPython raises from the failed fork() itself.
                raise OSError(err.errno, os.strerror(err.errno)) from None
            # The caller reads the pipe and reaps the child, as with CPython.
            os.write(errpipe_write, _error_bytes(err))
            return err.pid
        if want_pidfd:
            _childsetup.hand_pidfd(pidfd)
        return pid

    fork_exec.__wrapped__ = fallback  # type: ignore[attr-defined]
    fork_exec.__rdmaspawn__ = True  # type: ignore[attr-defined]
    return fork_exec


def _cpython_fork_exec() -> Callable[..., int]:
    import _posixsubprocess

    func = _posixsubprocess.fork_exec
    # Under patch() or guard() the module attribute may be a wrapper.
    while hasattr(func, "__wrapped__"):
        func = func.__wrapped__
    return func


#: The engine-based fork_exec used by rdmaspawn.Popen.
fork_exec: Callable[..., int] = make_fork_exec(_cpython_fork_exec())
