"""``rdmaspawn.Popen``'s own keyword arguments (``nice=``, ``pdeathsig=``, ...),
passed on as a ``preexec_fn`` value that ``fork_exec`` recognises, so that
CPython's own ``_execute_child`` carries them to the spawn unchanged.
"""
from __future__ import annotations

from typing import Any

from .._child.model import Chain, ChildSetup, build, merge
from . import cpython as _cpython

__all__ = ["SETUP_KEYWORDS", "SETUP_DEFAULTS", "setup_kwargs_to_preexec_fn"]

# rdmaspawn.Popen's keyword arguments and the ChildSetup field each sets.
_POPEN_KWARGS = {
    "pdeathsig": "pdeathsig", "rlimits": "rlimits", "nice": "nice", "ioprio": "ioprio",
    "cpu_affinity": "cpu_affinity", "no_new_privs": "no_new_privs",
    "ignore_signals": "ignore_signals", "default_signals": "default_signals",
    "signal_mask": "signal_mask", "cgroup": "cgroup", "controlling_tty": "ctty",
}

#: The keywords :func:`setup_kwargs_to_preexec_fn` folds: a Popen given none
#: of them need not call it.
SETUP_KEYWORDS = frozenset(_POPEN_KWARGS)

#: Each keyword's default, in Popen's order: build()'s for its field (each
#: one that sets nothing).
SETUP_DEFAULTS = {keyword: (build.__kwdefaults__ or {})[field]
                  for keyword, field in _POPEN_KWARGS.items()}


def setup_kwargs_to_preexec_fn(args: tuple[Any, ...], kwargs: dict[str, Any]
                               ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Popen's arguments with rdmaspawn's setup keywords folded into ``preexec_fn``.

    The user's own ``preexec_fn`` comes first; a recognised one merges with
    the setup, any other makes a :class:`Chain` (which needs fork).
    """
    if not kwargs or SETUP_KEYWORDS.isdisjoint(kwargs):
        return args, kwargs  # the usual Popen: nothing to fold
    fields = {_POPEN_KWARGS[name]: kwargs.pop(name) for name in list(kwargs)
              if name in _POPEN_KWARGS}
    fields = {name: value for name, value in fields.items()
              if value is not None and value is not False and value != ()}
    if not fields:
        return args, kwargs
    setup = build(**fields, privileged_first=True)
    at = _cpython.require().preexec_fn_position
    positional = len(args) > at
    user = args[at] if positional else kwargs.get("preexec_fn")
    if user is None:
        combined: Any = setup
    elif isinstance(user, ChildSetup):
        combined = merge(user, setup)
    else:
        combined = Chain((user, setup))
    if positional:
        args = args[:at] + (combined,) + args[at + 1:]
    else:
        kwargs["preexec_fn"] = combined
    return args, kwargs

