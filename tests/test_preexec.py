"""rdmaspawn.preexec helpers and which preexec_fn values run without fork.

The child state each produces is checked in test_declarative.py; these pin
down the conversion table and how values combine.
"""
from __future__ import annotations

import functools
import os
import resource
import signal

import pytest

from rdmaspawn import preexec as P
from rdmaspawn._child.model import ChildSetup
from rdmaspawn._child.recognize import as_setup

RECOGNISED = [
    (os.setsid, ChildSetup(os_setsid=True)),
    (os.setpgrp, ChildSetup(pgid=0)),
    (functools.partial(os.setpgid, 0, 0), ChildSetup(pgid=0)),
    (functools.partial(os.nice, 5), ChildSetup(nice=5)),
    (functools.partial(os.umask, 0o22), ChildSetup(umask=0o22)),
    (functools.partial(os.sched_setaffinity, 0, [0]), ChildSetup(cpu_affinity=frozenset({0}))),
    (functools.partial(resource.setrlimit, resource.RLIMIT_CORE, (0, -1)),
     ChildSetup(rlimits=((resource.RLIMIT_CORE, 0, 2**64 - 1),))),
    (functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN),
     ChildSetup(ignore_signals=frozenset({signal.SIGINT}))),
    (functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL),
     ChildSetup(default_signals=frozenset({signal.SIGINT}))),
    (functools.partial(signal.pthread_sigmask, signal.SIG_SETMASK, [signal.SIGINT]),
     ChildSetup(signal_mask=frozenset({signal.SIGINT}))),
    (P.pdeathsig(signal.SIGKILL), ChildSetup(pdeathsig=signal.SIGKILL)),
    (P.chain(os.setsid, functools.partial(os.nice, 2)), ChildSetup(os_setsid=True, nice=2)),
]

NOT_RECOGNISED = [
    lambda: None,
    os.getpid,
    functools.partial(os.nice, "5"),                       # fails in the child under CPython
    functools.partial(os.setpgid, 1234, 0),                # another process
    functools.partial(signal.signal, signal.SIGINT, print),  # a Python handler
    functools.partial(signal.pthread_sigmask, signal.SIG_BLOCK, [signal.SIGINT]),
    functools.partial(os.umask, mask=0),                   # keywords: not in the table
    P.chain(P.nice(1), lambda: None),
]


@pytest.mark.parametrize("value,expected", RECOGNISED)
def test_recognised_values(value: object, expected: ChildSetup) -> None:
    """Each value in recognize's table becomes exactly its ChildSetup."""
    assert as_setup(value) == expected


@pytest.mark.parametrize("value", NOT_RECOGNISED)
def test_other_values_need_fork(value: object) -> None:
    """Anything without an exact equivalent is left to CPython (fork)."""
    assert as_setup(value) is None


def test_chain_merges_later_wins() -> None:
    """chain() of helpers is one ChildSetup; a later helper wins for the same
    thing, limits merge per resource, a signal is in one set only."""
    merged = P.chain(
        P.nice(1), P.rlimit(resource.RLIMIT_CORE, 0, 0),
        P.rlimit(resource.RLIMIT_NOFILE, 10, 20), P.nice(3),
        P.rlimit(resource.RLIMIT_CORE, 1, 1),
        P.ignore_signals(signal.SIGINT), P.default_signals(signal.SIGINT))
    assert isinstance(merged, ChildSetup)
    assert merged.nice == 3
    assert sorted(merged.rlimits) == sorted([(resource.RLIMIT_CORE, 1, 1),
                                             (resource.RLIMIT_NOFILE, 10, 20)])
    assert merged.ignore_signals == frozenset()
    assert merged.default_signals == {signal.SIGINT}


def test_chain_with_other_callables_calls_each_in_order() -> None:
    """With a plain callable in it, chain() is a Chain that calls each."""
    calls: list[int] = []
    chained = P.chain(lambda: calls.append(1), lambda: calls.append(2))
    assert isinstance(chained, P.Chain)
    chained()
    assert calls == [1, 2]
    with pytest.raises(TypeError):
        P.chain(P.nice(1), 5)  # type: ignore[arg-type]


def test_helpers_check_their_arguments() -> None:
    """Bad values fail when the helper is made, in the parent."""
    with pytest.raises(ValueError):
        P.pdeathsig(0)
    with pytest.raises(ValueError):
        P.cpu_affinity([])
    with pytest.raises(TypeError):
        P.nice(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        P.ioprio(9, 0)
    with pytest.raises(ValueError):
        P.ignore_signals(65)
