"""``Popen._execute_child``: CPython's own, with its error pipe in memory.

Compiled again from this CPython's ``Lib/subprocess.py`` with the error
pipe's calls made ``dropin/errpipe.py``'s ``CALLS``, every other line (line
numbers included) CPython's; only where the source compiles to the method's
own code and ``cpython.errpipe_calls()`` passes. Done at the first spawn,
never at import (milliseconds).
"""
from __future__ import annotations

import sys
import types
from typing import Any, Callable

from . import cpython as _cpython

__all__ = ["NAMES", "code", "method", "rebuilt"]

#: The globals through which the recompiled method reaches
#: ``dropin.errpipe.CALLS``: pipe, read, close.
NAMES = ("_rdmaspawn_errpipe_pipe", "_rdmaspawn_errpipe_read", "_rdmaspawn_errpipe_close")


#: The local that holds the fork_exec the pipe was made for.
_CALLEE = "_rdmaspawn_fork_exec"


def _changed(old: str, call: str, fork_exec: str) -> str:
    """``old``, one of ``dropin.cpython.ERRPIPE_CALLS``, calling :data:`NAMES`'
    instead of ``os.<call>``. The pipe call is given ``fork_exec`` and returns
    it (:data:`_CALLEE`): looked up again, it may no longer be (``unpatch()``
    in another thread), and CPython's would get a pipe it cannot use.
    """
    name = NAMES[("pipe", "read", "close").index(call)]
    if call == "pipe":
        return old.replace("errpipe_write = os.pipe()",
                           f"errpipe_write, {_CALLEE} = {name}({fork_exec})")
    return old.replace(f"os.{call}(", f"{name}(")


#: code()'s answers by the id of the code they were made from, kept with it
#: (code objects compare by value, file name left out).
_made: dict[int, tuple[types.CodeType, types.CodeType | None]] = {}


def _method_source(func: Callable[..., Any]) -> str | None:
    """The method's lines from its file, on its own line numbers, inside a
    class of its class's name (names mangled as CPython's); None if
    unreadable. The first line imports what its module imports: the compiler
    (3.12+) loads an imported module's function differently from a method's.
    """
    code = func.__code__
    owner, _, name = func.__qualname__.rpartition(".")
    module = sys.modules.get(func.__module__)
    if not owner.isidentifier() or name != code.co_name or module is None:
        return None
    imported = sorted(k for k, v in vars(module).items()
                      if isinstance(v, types.ModuleType) and k.isidentifier())
    try:
        # subprocess.py is UTF-8 (no coding line); anything else fails the check.
        with open(code.co_filename, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
    except (OSError, ValueError):
        return None
    first = code.co_firstlineno - 1
    if not 2 <= first < len(lines):
        return None
    head = lines[first]
    indent = len(head) - len(head.lstrip())
    end = first + 1
    while end < len(lines):
        text = lines[end].lstrip()
        if text and not text.startswith("#") and len(lines[end]) - len(text) <= indent:
            break
        end += 1
    return (f"import {', '.join(imported) or 'sys'}" + "\n" * (first - 1) + f"class {owner}:\n"
            + "".join(lines[first:end]))


def _compiled(source: str, code: types.CodeType) -> types.CodeType | None:
    try:
        module = compile(source, code.co_filename, "exec", dont_inherit=True)
    except SyntaxError:
        return None
    for cls in module.co_consts:
        if isinstance(cls, types.CodeType):
            for const in cls.co_consts:
                if isinstance(const, types.CodeType) and const.co_name == code.co_name:
                    return const
    return None


def code(func: Callable[..., Any]) -> types.CodeType | None:
    """The code of CPython's ``Popen._execute_child`` with its error pipe in
    memory (:data:`NAMES` among its globals); None where not certain."""
    original = func.__code__
    if id(original) not in _made:
        _made[id(original)] = (original, _recompiled(func))
    return _made[id(original)][1]


def _recompiled(func: Callable[..., Any]) -> types.CodeType | None:
    original = func.__code__
    internals = _cpython.current()
    source = _method_source(func)
    if internals is None or source is None or _compiled(source, original) != original:
        return None
    calls = _cpython.errpipe_calls(source)
    if calls is None:
        return None
    module, attr = internals.home
    fork_exec = attr if module == "subprocess" else f"{module}.{attr}"
    if source.count(f"{fork_exec}(") != 1:
        return None
    source = source.replace(f"{fork_exec}(", f"{_CALLEE}(")
    for old, call in calls:
        source = source.replace(old, _changed(old, call, fork_exec))
    return _compiled(source, original)


def method(func: Callable[..., Any]) -> Callable[..., Any] | None:
    """``func`` with :func:`code`, its own globals and names (which need
    :data:`NAMES`: ``patch()`` puts them there, for good); None as :func:`code`."""
    changed = code(func)
    return None if changed is None else rebuilt(func, changed, func.__globals__,
                                                 func.__module__, func.__qualname__)


def rebuilt(func: Callable[..., Any], code: types.CodeType, globals_: dict[str, Any],
            module: str, qualname: str) -> Callable[..., Any]:
    """``func`` with ``code`` and ``globals_``: its defaults, closure and doc kept."""
    new = types.FunctionType(code, globals_, func.__name__, func.__defaults__, func.__closure__)
    new.__kwdefaults__ = func.__kwdefaults__
    new.__doc__ = func.__doc__
    new.__module__ = module
    new.__qualname__ = qualname
    return new
