"""Call a function as if from its caller's line, so that C warnings blame the caller.

A warning raised in C (3.12+'s os.fork() DeprecationWarning about threads)
names the innermost Python frame, under guard() the guard's wrapper, so a
filter on the caller's module would miss it. :func:`call_from` makes the call
from code with the caller's globals, file name and line: all a warning reads.
"""

from __future__ import annotations

TYPE_CHECKING = False  # types and typing: see guard.py (loaded at start-up)
if TYPE_CHECKING:
    from types import CodeType, FrameType
    from typing import Any, Callable

__all__ = ["call_from"]

_TEMPLATE: CodeType | None = None  # compiled at the first call, not by an import that may never call
_SITES: dict[tuple[str, int], CodeType] = {}
_MAX_SITES = 4096  # a bound, for programs that fork from generated code


def call_from(caller: FrameType, fn: Callable[..., Any], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)``, with ``caller``'s file, line and globals on top."""
    key = (caller.f_code.co_filename, caller.f_lineno or caller.f_code.co_firstlineno)
    site = _SITES.get(key)
    if site is None:
        global _TEMPLATE
        if _TEMPLATE is None:
            _TEMPLATE = compile("__call(*__args, **__kwargs)", "<rdmaspawn call site>", "eval")
        # One line of code: its line number is co_firstlineno on every version.
        site = _TEMPLATE.replace(co_filename=key[0], co_firstlineno=key[1])
        if len(_SITES) < _MAX_SITES:
            _SITES[key] = site
    return eval(site, caller.f_globals, {"__call": fn, "__args": args, "__kwargs": kwargs})
