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
from typing import Any

from .._switch import START_METHODS

__all__ = ["get_context", "prefer_start_method", "restore_start_method"]

_lock = threading.Lock()
# The default context we replaced, while our preference is in force.
_replaced: Any | None = None


def _private_context_module() -> Any:
    """``multiprocessing.context``, typed loosely: we use its private names (see above)."""
    from multiprocessing import context

    return context


def _check(method: str) -> None:
    if method not in START_METHODS:
        raise ValueError(
            f"start method must be one of {', '.join(map(repr, START_METHODS))}, not {method!r}")


def prefer_start_method(method: str = "forkserver") -> bool:
    """Make ``method`` multiprocessing's default unless the program already chose or used one.

    Returns whether it did. Undo with :func:`restore_start_method`.
    """
    global _replaced
    _check(method)
    context = _private_context_module()
    default = context._default_context
    with _lock:
        if default._actual_context is not None:
            return False
        previous = default._default_context
        default._default_context = context._concrete_contexts[method]
        if _replaced is None:
            _replaced = previous
    return True


def restore_start_method() -> None:
    """Put back multiprocessing's own default where nothing has used ours yet."""
    global _replaced
    with _lock:
        if _replaced is None:
            return
        default = _private_context_module()._default_context
        if default._actual_context is None:
            default._default_context = _replaced
        _replaced = None


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
