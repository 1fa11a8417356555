"""``preexec_fn`` values that need no fork.

Each helper returns an ordinary callable. Under stock CPython it works as
``preexec_fn`` the usual way: CPython forks and the child calls it. Where
rdmaspawn starts the child (``rdmaspawn.Popen``, or ``subprocess`` under
``rdmaspawn.patch()``), the same value is carried out declaratively, with
raw system calls in the CLONE_VM child, so no fork happens and a process
that holds RDMA (MADV_DONTFORK) memory can use it::

    subprocess.Popen(cmd, preexec_fn=rdmaspawn.preexec.chain(
        rdmaspawn.preexec.pdeathsig(signal.SIGKILL),
        rdmaspawn.preexec.rlimit(resource.RLIMIT_NOFILE, 4096, 4096)))

A failed step raises :class:`rdmaspawn.ChildSetupError`: an OSError with
the errno and the step (``setrlimit``, ``prctl``, ...), which is also a
``subprocess.SubprocessError`` like CPython's "Exception occurred in
preexec_fn." (the order of the steps is in ``rdmaspawn._setup``).
"""
from __future__ import annotations

import signal
from collections.abc import Iterable
from typing import Any, Callable

from ._setup import Chain, ChildSetup, build, merge

__all__ = [
    "Chain", "ChildSetup", "chain", "cgroup", "controlling_tty", "cpu_affinity",
    "default_signals", "ignore_signals", "ioprio", "new_session", "nice",
    "no_new_privs", "pdeathsig", "process_group", "rlimit", "signal_mask", "umask",
]


def pdeathsig(sig: int = signal.SIGTERM) -> ChildSetup:
    """Get ``sig`` when the parent process dies (PR_SET_PDEATHSIG).

    Under rdmaspawn the signal follows the parent *process*, even when the
    child was started from a thread that exits; a parent that died before
    the child could ask makes the child take the signal at once.
    """
    return build(pdeathsig=sig)


def rlimit(resource: int, soft: int, hard: int) -> ChildSetup:
    """``resource.setrlimit(resource, (soft, hard))``; -1 is RLIM_INFINITY."""
    return build(rlimits={resource: (soft, hard)})


def nice(increment: int) -> ChildSetup:
    """``os.nice(increment)``."""
    return build(nice=increment)


def ioprio(klass: int, level: int = 0) -> ChildSetup:
    """ioprio_set(2) for the child: class (1 RT, 2 best effort, 3 idle) and level."""
    return build(ioprio=(klass, level))


def cpu_affinity(cpus: Iterable[int]) -> ChildSetup:
    """``os.sched_setaffinity(0, cpus)``."""
    return build(cpu_affinity=cpus)


def no_new_privs() -> ChildSetup:
    """prctl(PR_SET_NO_NEW_PRIVS, 1): exec can never grant privileges again."""
    return build(no_new_privs=True)


def ignore_signals(*signals: int) -> ChildSetup:
    """``signal.signal(sig, SIG_IGN)`` for each (ignored stays ignored across exec)."""
    return build(ignore_signals=signals)


def default_signals(*signals: int) -> ChildSetup:
    """``signal.signal(sig, SIG_DFL)`` for each."""
    return build(default_signals=signals)


def signal_mask(signals: Iterable[int]) -> ChildSetup:
    """``signal.pthread_sigmask(SIG_SETMASK, signals)``: the mask the child execs with."""
    return build(signal_mask=signals)


def new_session() -> ChildSetup:
    """``os.setsid()`` (Popen's ``start_new_session=True``)."""
    return build(setsid=True)


def process_group(pgid: int = 0) -> ChildSetup:
    """``os.setpgid(0, pgid)``; 0 (``os.setpgrp()``) starts a group of its own."""
    return build(pgid=pgid)


def umask(mask: int) -> ChildSetup:
    """``os.umask(mask)``."""
    return build(umask=mask)


def cgroup(path: Any) -> ChildSetup:
    """Start in the cgroup v2 directory ``path`` (CLONE_INTO_CGROUP, else cgroup.procs)."""
    return build(cgroup=path)


def controlling_tty(fd: int = 0) -> ChildSetup:
    """A new session whose controlling terminal is the tty on ``fd``.

    ``fd`` is numbered as in the child once stdin/stdout/stderr are in place
    (0 for a terminal given as stdin). What ``pty.fork()`` does for its child.
    """
    return build(ctty=fd)


def chain(*fns: Callable[[], Any]) -> ChildSetup | Chain:
    """All of ``fns`` as one ``preexec_fn``, in order.

    Setups from this module merge into one (a later one wins where two set
    the same thing); with other callables in the mix the result is a
    :class:`Chain`, which rdmaspawn still runs without fork when it
    recognises every member (``os.setsid``, ``functools.partial(os.nice, 5)``, ...).
    """
    if all(isinstance(fn, ChildSetup) for fn in fns):
        result = ChildSetup()
        for fn in fns:
            result = merge(result, fn)  # type: ignore[arg-type]
        return result
    for fn in fns:
        if not callable(fn):
            raise TypeError(f"chain() takes callables, not {type(fn).__name__}")
    return Chain(fns)
