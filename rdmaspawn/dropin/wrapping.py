"""Chains of wrappers linked by ``__wrapped__``, which ``patch()`` and ``guard()`` share.

Either may be undone while the other still wraps it, so undoing takes one
link out of a chain, wherever it now stands.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["chain", "innermost", "splice_out"]

# A chain longer than this is a cycle, not a stack of wrappers.
_MAX_LINKS = 64


def chain(func: Any) -> Iterator[Any]:
    """``func``, what it wraps, what that wraps, ... down to the innermost."""
    for _ in range(_MAX_LINKS):
        yield func
        if not hasattr(func, "__wrapped__"):
            return
        func = func.__wrapped__
    raise RuntimeError(f"__wrapped__ chain of {func!r} is longer than {_MAX_LINKS}: a cycle?")


def innermost(func: Any) -> Any:
    """The function at the bottom of ``func``'s chain (CPython's own, usually)."""
    *_, bottom = chain(func)
    return bottom


def splice_out(owner: Any, attr: str, link: Any, below: Any = None) -> bool:
    """Take ``link`` out of the chain that starts at ``owner.attr``, putting its
    ``__wrapped__`` (else ``below``) in its place; False where it is not in
    the chain or a wrapper refuses the new ``__wrapped__``."""
    below = getattr(link, "__wrapped__", below)
    current = getattr(owner, attr, None)
    if current is link:
        setattr(owner, attr, below)
        return True
    for outer in chain(current):
        if getattr(outer, "__wrapped__", None) is link:
            try:
                outer.__wrapped__ = below
            except (AttributeError, TypeError):
                return False
            return True
    return False
