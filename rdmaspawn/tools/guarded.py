"""``guarded()``: :func:`~rdmaspawn.tools.guard.guard` for a block or a function, then
the state before it put back; its own module, so only a program that uses it imports it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from .guard import guard, is_guarded, unguard

__all__ = ["guarded"]


class guarded:  # noqa: N801  # called as a function is: guarded("raise")
    """``with guarded("raise"):`` guard for the block, then restore the previous state;
    ``@guarded("raise")``: each call of the function so."""

    def __init__(self, action: str = "warn") -> None:
        self._action = action
        self._previous: str | None = None

    def __enter__(self) -> None:
        self._previous = is_guarded()
        guard(self._action)

    def __exit__(self, *exc: object) -> None:
        if self._previous is None:
            unguard()
        else:
            guard(self._previous)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        action = self._action

        @functools.wraps(func, updated=())
        def inner(*args: Any, **kwargs: Any) -> Any:
            with guarded(action):
                return func(*args, **kwargs)

        return inner
