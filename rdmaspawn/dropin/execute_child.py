"""``Popen._execute_child``: CPython's own, with its error pipe in memory.

The method is compiled again from this CPython's own ``Lib/subprocess.py``,
with five calls changed and nothing else: ``os.pipe()`` that makes the error
pipe, the two ``os.close()`` of its ends and the ``os.read()`` of it become
calls of ``dropin/errpipe.py``'s ``CALLS`` (which says why); the pipe call
is given the ``fork_exec`` the method is about to call, makes a real pipe
for any that is not rdmaspawn's, and hands back that fork_exec, which the
fifth change, the call of fork_exec, then calls. Every other line, the line numbers
and the file name in a traceback included, is CPython's. rdmaspawn.Popen
runs it with its own globals, and CPython's Popen under ``patch()`` with
subprocess's.

It is used only where that is certain: the source on disk, compiled
unchanged, must give exactly the method's own code, and ``dropin.cpython``'s
gate of the pipe's lines (``errpipe_calls()``) must pass: each of the four
calls once, the pipe named in no other statement than those it knows, and
one call of fork_exec. Otherwise (no source file, a CPython that reads its
pipe some other way, or hands it to one more call) :func:`code` returns None
and the method stays CPython's, with a real pipe. Reading and compiling
twice is milliseconds (docs/benchmark.md): done once per process, not before
the first spawn that needs it (rdmaspawn.Popen's) or ``patch()``, never at import.
"""
from __future__ import annotations

import sys
import types
from typing import Any, Callable

from . import cpython as _cpython

__all__ = ["NAMES", "code", "method"]

#: The globals through which the recompiled method reaches
#: ``dropin.errpipe.CALLS``: pipe, read, close.
NAMES = ("_rdmaspawn_errpipe_pipe", "_rdmaspawn_errpipe_read", "_rdmaspawn_errpipe_close")


#: The local that holds the fork_exec the pipe was made for.
_CALLEE = "_rdmaspawn_fork_exec"


def _changed(old: str, call: str, fork_exec: str) -> str:
    """``old``, one of the pipe's calls (``dropin.cpython.ERRPIPE_CALLS``),
    calling :data:`NAMES`' instead of ``os.<call>``; the pipe is given
    ``fork_exec``, the expression through which the method calls it.

    The pipe call also returns the fork_exec it was made for, and the method
    calls that one (:data:`_CALLEE`): looked up again, it may no longer be
    (``unpatch()`` in another thread), and CPython's would be handed a pipe
    it cannot use.
    """
    name = NAMES[("pipe", "read", "close").index(call)]
    if call == "pipe":
        return old.replace("errpipe_write = os.pipe()",
                           f"errpipe_write, {_CALLEE} = {name}({fork_exec})")
    return old.replace(f"os.{call}(", f"{name}(")


#: code()'s answers, by the id of the code they were made from (code objects
#: compare by value, file name left out), with that code: one compile per
#: process.
_made: dict[int, tuple[types.CodeType, types.CodeType | None]] = {}


def _method_source(func: Callable[..., Any]) -> str | None:
    """The method's lines from its file, after lines that put its def on its
    own line number, inside a class of its own class's name (so that names
    are mangled and qualified as CPython's are); None if unreadable.

    The first line imports the modules its module imports: the compiler
    loads an imported module's function as an attribute, not as a method
    (3.12+), and must see the same imports to make the same code.
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
    """The code of CPython's ``func`` (``Popen._execute_child``) with its
    error pipe in memory, to run with :data:`NAMES` bound to
    ``dropin.errpipe.CALLS`` among its globals; None where that cannot be
    made with certainty."""
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
    """``func`` (CPython's ``Popen._execute_child``) with its error pipe in
    memory, its own globals, defaults and names; None as :func:`code`. Its
    globals need :data:`NAMES` (``patch()`` puts them there, for good)."""
    changed = code(func)
    if changed is None:
        return None
    new = types.FunctionType(changed, func.__globals__, func.__name__, func.__defaults__,
                             func.__closure__)
    new.__kwdefaults__ = func.__kwdefaults__
    new.__doc__ = func.__doc__
    new.__qualname__ = func.__qualname__
    new.__module__ = func.__module__
    return new
