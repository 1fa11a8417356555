"""multiprocessing without fork: a default start method; the contexts get_context() makes.

``patch()`` cannot help a fork child when fork is the start method:
:func:`prefer_start_method` changes the *default*, as 3.14 does, without
choosing for the program (through ``multiprocessing.context``'s private names).
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple

from .._startup.switch import START_METHODS

__all__ = ["Preference", "check_method", "default_method", "prefer_start_method",
           "undo_preference"]

_lock = threading.Lock()


class Preference(NamedTuple):
    """One change of the default context: what to put back, and ours."""

    replaced: Any
    ours: Any


def _private_context_module() -> Any:
    """``multiprocessing.context``, typed loosely: we use its private names (see above)."""
    from multiprocessing import context

    return context


def default_method() -> str | None:
    """The start method multiprocessing uses where the program chooses none
    (what :func:`prefer_start_method` changes); None if that is unreadable."""
    try:
        return str(_private_context_module()._default_context._default_context._name)
    except AttributeError:
        return None


def check_method(method: str) -> None:
    """ValueError unless ``method`` is a start method that never forks this process."""
    if method not in START_METHODS:
        raise ValueError(
            f"start method must be one of {', '.join(map(repr, START_METHODS))}, not {method!r}")


def prefer_start_method(method: str = "forkserver") -> Preference | None:
    """Make ``method`` multiprocessing's default unless the program already chose or used one.

    Returns the change made (None: none), for :func:`undo_preference`.
    Whoever undoes undoes only its own change (``unpatch()`` leaves what
    ``RDMASPAWN=start_method=`` set).
    """
    check_method(method)
    context = _private_context_module()
    default = context._default_context
    with _lock:
        if default._actual_context is not None:
            return None
        replaced = default._default_context
        default._default_context = ours = context._concrete_contexts[method]
    return Preference(replaced, ours)


def undo_preference(preference: Preference) -> None:
    """Put back the default ``preference`` replaced, where it is still in
    force and nothing has used it (else the later choice stands)."""
    default = _private_context_module()._default_context
    with _lock:
        if default._actual_context is None and default._default_context is preference.ours:
            default._default_context = preference.replaced

