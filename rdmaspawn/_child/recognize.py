"""``preexec_fn`` without fork: which values have a declarative equivalent
(:func:`as_setup`; docs/preexec.md lists them). Anything else still needs fork.
"""
from __future__ import annotations

import functools
import os
import resource
import signal
from typing import Any, Callable

from .model import Chain, ChildSetup, build, merge

__all__ = ["as_setup"]

_PLAIN: dict[Callable[..., Any], dict[str, Any]] = {
    os.setsid: {"os_setsid": True},
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
