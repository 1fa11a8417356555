"""``preexec_fn`` without fork: which values have a declarative equivalent.

CPython runs ``preexec_fn`` in a forked child, which a process holding
MADV_DONTFORK memory cannot afford. Many launchers pass one of a handful of
values whose whole effect a :class:`~rdmaspawn._setup.ChildSetup` can carry
out in the CLONE_VM child with raw system calls; :func:`as_setup` finds
them: ``rdmaspawn.preexec`` values and their chains, ``os.setsid``,
``os.setpgrp`` (``_PLAIN``), and the ``functools.partial`` forms in
``_from_partial`` (docs/preexec.md lists them for users).

Anything else (a lambda, a function of the caller's) still needs fork.

This module also hands the pidfd from ``fork_exec`` (which must return a
bare pid, as CPython's does) up to ``rdmaspawn.Popen``, per thread.
"""
from __future__ import annotations

import functools
import os
import resource
import signal
from typing import Any, Callable

from .. import _capi
from .._setup import Chain, ChildSetup, build, merge

__all__ = ["as_setup", "setup_kwargs_to_preexec_fn", "request_pidfd", "pidfd_requested",
           "hand_pidfd", "take_pidfd"]

_PLAIN: dict[Callable[..., Any], dict[str, Any]] = {
    os.setsid: {"setsid": True},
    os.setpgrp: {"pgid": 0},
}


def _from_partial(func: Callable[..., Any], args: tuple[Any, ...]) -> dict[str, Any] | None:
    if func is os.nice and len(args) == 1:
        return {"nice": args[0]}
    if func is os.umask and len(args) == 1:
        return {"umask": args[0]}
    if func is os.setpgid and len(args) == 2 and args[0] == 0:
        return {"pgid": args[1]}
    if func is os.sched_setaffinity and len(args) == 2 and args[0] == 0:
        return {"cpu_affinity": args[1]}
    if func is resource.setrlimit and len(args) == 2:
        return {"rlimits": {args[0]: args[1]}}
    if func is signal.signal and len(args) == 2:
        if args[1] == signal.SIG_IGN:
            return {"ignore_signals": (args[0],)}
        if args[1] == signal.SIG_DFL:
            return {"default_signals": (args[0],)}
    if func is signal.pthread_sigmask and len(args) == 2 and args[0] == signal.SIG_SETMASK:
        return {"signal_mask": args[1]}
    return None


def as_setup(preexec_fn: Any) -> ChildSetup | None:
    """The declarative equivalent of ``preexec_fn``, or None where it needs fork.

    A value with bad arguments (``partial(os.nice, "x")``) is not converted:
    it gets CPython's behaviour, failing in the forked child.
    """
    if isinstance(preexec_fn, ChildSetup):
        return preexec_fn
    if isinstance(preexec_fn, Chain):
        result = ChildSetup()
        for fn in preexec_fn:
            part = as_setup(fn)
            if part is None:
                return None
            result = merge(result, part)
        return result
    try:
        fields = _PLAIN.get(preexec_fn)
    except TypeError:  # unhashable
        return None
    if (fields is None and isinstance(preexec_fn, functools.partial)
            and not preexec_fn.keywords):
        fields = _from_partial(preexec_fn.func, preexec_fn.args)
    if fields is None:
        return None
    try:
        return build(**fields)
    except (TypeError, ValueError):
        return None


# rdmaspawn.Popen's keyword arguments and the ChildSetup field each sets.
_POPEN_KWARGS = {
    "pdeathsig": "pdeathsig", "rlimits": "rlimits", "nice": "nice", "ioprio": "ioprio",
    "cpu_affinity": "cpu_affinity", "no_new_privs": "no_new_privs",
    "ignore_signals": "ignore_signals", "default_signals": "default_signals",
    "signal_mask": "signal_mask", "cgroup": "cgroup", "controlling_tty": "ctty",
}
_PREEXEC_FN_POSITION = 6  # Popen(args, bufsize, executable, stdin, stdout, stderr, preexec_fn)


def setup_kwargs_to_preexec_fn(args: tuple[Any, ...], kwargs: dict[str, Any]
                               ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Popen's arguments with rdmaspawn's setup keywords folded into ``preexec_fn``.

    The user's own ``preexec_fn`` comes first; a recognised one merges with
    the setup, any other makes a :class:`Chain` (which needs fork).
    """
    if not kwargs or _POPEN_KWARGS.keys().isdisjoint(kwargs):
        return args, kwargs  # the usual Popen: nothing to fold
    fields = {_POPEN_KWARGS[name]: kwargs.pop(name) for name in list(kwargs)
              if name in _POPEN_KWARGS}
    fields = {name: value for name, value in fields.items()
              if value is not None and value is not False and value != ()}
    if not fields:
        return args, kwargs
    setup = build(**fields, privileged_first=True)
    positional = len(args) > _PREEXEC_FN_POSITION
    user = args[_PREEXEC_FN_POSITION] if positional else kwargs.get("preexec_fn")
    if user is None:
        combined: Any = setup
    elif isinstance(user, ChildSetup):
        combined = merge(user, setup)
    else:
        combined = Chain((user, setup))
    if positional:
        args = args[:_PREEXEC_FN_POSITION] + (combined,) + args[_PREEXEC_FN_POSITION + 1:]
    else:
        kwargs["preexec_fn"] = combined
    return args, kwargs


# The pidfd hand-over lives in C (csrc/python/functions.c), where the C
# fork_exec hands the pidfd over without a trip through Python.
request_pidfd = _capi.request_pidfd
pidfd_requested = _capi.pidfd_requested
hand_pidfd = _capi.hand_pidfd
take_pidfd = _capi.take_pidfd
