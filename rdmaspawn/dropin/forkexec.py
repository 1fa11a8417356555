"""A drop-in for ``_posixsubprocess.fork_exec`` built on the engine: a child's
failure reaches ``_execute_child`` as CPython's child would report it."""
from __future__ import annotations

import functools
import os
import subprocess
from typing import Any, Callable

from .._child import pack
from .._child.model import Chain
from .._child.pack import ChildSetupError
from .._child.recognize import as_setup
from .._native import capi as _capi
from .._native import engine as _engine  # noqa: F401  (sets the C side's SpawnError)
from . import cpython as _cpython
from . import errpipe as _errpipe
from . import interrupts
from . import wrapping as _wrapping

__all__ = ["PreexecFnError", "make_fork_exec", "fork_exec"]

# What to use instead of a preexec_fn, one line each (PreexecFnError's message).
_REPLACEMENTS = (
    ("os.chdir(path)", "cwd=path"),
    ("os.umask(mask)", "umask=mask"),
    ("os.setsid()", "start_new_session=True"),
    *((("os.setpgid(0, pgid)", "process_group=pgid"),)
      if "pgid_to_set" in getattr(_cpython.current(), "params", ()) else ()),
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
    ("signal.pthread_sigmask(how, sigs)", "rdmaspawn.preexec.signal_mask(whole_mask)"),
    ("a controlling terminal (pty)", "rdmaspawn.pty_spawn(argv)"),
    ("several of these", "rdmaspawn.preexec.chain(a, b, ...)"),
)


class PreexecFnError(subprocess.SubprocessError, RuntimeError):
    """preexec_fn was given in a process where fork() would crash the child."""


def _name(fn: Any) -> str:
    """``module.qualname`` of a preexec_fn, for the refusal: what to go and change."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({_name(fn.func)}, ...)"
    if isinstance(fn, Chain):  # the members that need fork
        return ", ".join(_name(part) for part in fn if as_setup(part) is None)
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return f"{module}.{qualname}"


def _refuse_preexec_fn(preexec_fn: Any) -> None:
    width = max(len(old) for old, _ in _REPLACEMENTS)
    lines = "\n".join(f"  {old:<{width}}  ->  {new}" for old, new in _REPLACEMENTS)
    raise PreexecFnError(
        "preexec_fn needs fork(), and this process holds "
        "MADV_DONTFORK (RDMA) memory\n"
        f"preexec_fn: {_name(preexec_fn)}\n"
        "A forked child misses those pages and can crash before exec.\n"
        "Use what rdmaspawn runs without fork (docs/preexec.md):\n" + lines
    )


def _preexec_fn(owner: Any, *args: Any) -> int:
    """A fork_exec call with a preexec_fn: one with a declarative equivalent
    is packed and handed back to ``owner``, the C fork_exec it came through;
    any other goes to its ``__wrapped__``, looked up at each call, so that a
    wrapper applied later can be taken out of the chain again.
    """
    internals = _cpython.require()
    call = _cpython.unpack_fork_exec(args)
    setup = as_setup(call.preexec_fn)
    if setup is None:
        # The doctor's and the guard's rule; imported here, where a preexec_fn
        # needs fork, not at every interpreter's start under RDMASPAWN=on.
        from .._host.forkrisk import has_fork_hazard

        if has_fork_hazard():
            _refuse_preexec_fn(call.preexec_fn)
        # No DONTFORK memory a fork() child trips on: fork() is safe, and only
        # it can run Python code in the child. Behave exactly as CPython does.
        interrupts.lift()
        if _errpipe.is_memory(call.errpipe_write):  # CPython's child needs a real one
            return _errpipe.call_with_real_pipe(owner.__wrapped__, args, internals.params)
        return owner.__wrapped__(*args)  # type: ignore[no-any-return]
    if setup.umask is not None:  # the last umask set wins, and one cannot fail
        args = _cpython.replace_fork_exec(args, child_umask=setup.umask)
    try:
        return _capi.fork_exec_setup(owner, args, pack.then(setup, call.uid, call.gid,
                                                            call.extra_groups, (None, -1)))
    except ChildSetupError as err:
        # Raised here, as a failed fork() is: the caller closes the pipes.
        if err.pid is not None:
            os.waitpid(err.pid, 0)
            err.pid = None
        raise


def make_fork_exec(fallback: Callable[..., int]) -> Callable[..., int]:
    """The C fork_exec (csrc/python/fork_exec.c), whose call with a
    preexec_fn that needs fork goes to ``fallback`` (CPython's, kept on
    ``__wrapped__``); on a CPython rdmaspawn does not know, a function that
    raises UnsupportedPython.
    """
    internals = _cpython.current()
    if internals is not None:
        names = _capi.fork_exec_params()
        if sorted(names) != sorted(_cpython.ForkExecCall._fields):
            # Cannot happen in a consistent build (tests/test_forkexec.py).
            raise RuntimeError(f"csrc/python/fork_exec.c's parameters {names} are not "
                               f"ForkExecCall's {_cpython.ForkExecCall._fields}")
        return _capi.fork_exec_new(fallback, _preexec_fn, _cpython.fork_exec_positions(names),
                                   internals.fork_exec_wording, internals.chdir_tag,
                                   _errpipe.write, _errpipe.FIRST_FD)

    def fork_exec(*args: Any) -> int:
        _cpython.require()  # raises UnsupportedPython, saying what did not match
        raise AssertionError("require() passed where current() did not")

    fork_exec.__wrapped__ = fallback  # type: ignore[attr-defined]
    fork_exec.__rdmaspawn__ = True  # type: ignore[attr-defined]
    return fork_exec


def _cpython_fork_exec() -> Callable[..., int]:
    import _posixsubprocess

    # Under patch() or guard() the module attribute may be a wrapper.
    return _wrapping.innermost(_posixsubprocess.fork_exec)  # type: ignore[no-any-return]


#: The engine-based fork_exec used by rdmaspawn.Popen.
fork_exec: Callable[..., int] = make_fork_exec(_cpython_fork_exec())
