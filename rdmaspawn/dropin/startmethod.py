"""multiprocessing without fork: a default start method and :func:`get_context`.

On Linux, CPython 3.9-3.13 start multiprocessing's workers with ``fork`` unless
the program picks a method (3.14 made ``forkserver`` the default). A fork
child of a process that holds MADV_DONTFORK memory dies with SIGSEGV, and
``multiprocessing.Pool`` then restarts workers forever. ``rdmaspawn.patch()``
cannot help there: the fork is the start method itself. Two ways out:

- :func:`prefer_start_method` changes the *default*, as 3.14 does, without
  choosing for the program: ``multiprocessing.set_start_method()`` still
  works afterwards (it would raise "context has already been set" had we
  called it), ``get_context("fork")`` still forks, and once anything used the
  default (``get_start_method()``, ``Pool()``, ...) we leave it alone.
- :func:`get_context` returns a context for ``DataLoader(multiprocessing_context=)``,
  ``ProcessPoolExecutor(mp_context=)`` and ``Pool``: an explicit choice.

Both start the forkserver (or each spawn child) and the resource tracker
through ``_posixsubprocess.fork_exec``, which forks on 3.9 and, on
3.10-3.13, wherever ``subprocess._USE_VFORK`` is false: they go through the engine once
``patch()`` is in force, which :func:`get_context` ensures.

CPython's private part used here, the same on 3.9-3.15:
``multiprocessing.context._default_context`` is a ``DefaultContext`` whose
``_default_context`` attribute is the context used when the program chose
none, and whose ``_actual_context`` stays ``None`` until something chose or
used one.
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple

from .._switch import START_METHODS

__all__ = ["get_context", "prefer_start_method", "undo_preference", "Preference"]

_lock = threading.Lock()


class Preference(NamedTuple):
    """One change of the default context: what to put back, and ours."""

    replaced: Any
    ours: Any


def _private_context_module() -> Any:
    """``multiprocessing.context``, typed loosely: we use its private names (see above)."""
    from multiprocessing import context

    return context


def _check(method: str) -> None:
    if method not in START_METHODS:
        raise ValueError(
            f"start method must be one of {', '.join(map(repr, START_METHODS))}, not {method!r}")


def prefer_start_method(method: str = "forkserver") -> Preference | None:
    """Make ``method`` multiprocessing's default unless the program already chose or used one.

    Returns the change made (None: none), for :func:`undo_preference`.
    Whoever undoes undoes only its own change (``unpatch()`` leaves what
    ``RDMASPAWN=start_method=`` set).
    """
    _check(method)
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


def get_context(method: str = "forkserver") -> Any:
    """A multiprocessing context whose workers never come from a fork of this process.

    ``"forkserver"`` (the default; CPython 3.14's default on Linux) or
    ``"spawn"``. Applies ``rdmaspawn.patch()`` (idempotent) so that the
    server, each spawn child and the resource tracker start through the
    engine. Workers need what those methods always need: picklable targets
    and arguments, and a main module that can be imported again (the usual
    ``if __name__ == "__main__":``).
    """
    _check(method)
    import multiprocessing

    from .patch import patch

    patch()
    return multiprocessing.get_context(method)
