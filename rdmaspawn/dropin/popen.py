"""``rdmaspawn.Popen`` and the module functions of ``subprocess``.

CPython's own ``subprocess.Popen`` and functions, rebound to a namespace in
which both primitives that start a child (``fork_exec`` and ``_posix_spawn``)
are the engine's: everything else is exactly CPython's, on every version.
"""
from __future__ import annotations

import _signal  # signal's C half: getsignal() without the enum conversion
import os
import signal
import subprocess
import threading
import types
from typing import Any, Callable

from .._native import capi as _capi
from . import cpython as _cpython
from . import errpipe as _errpipe
from . import execute_child as _execute_child
from . import forkexec as _forkexec
from . import interrupts  # noqa: F401  # names the thread that holds SIGINT back
from . import pidfd as _pidfd
from . import posixspawn as _posixspawn
from .setupkeywords import SETUP_DEFAULTS, SETUP_KEYWORDS, setup_kwargs_to_preexec_fn

__all__ = [
    "Popen", "run", "call", "check_call", "check_output", "getoutput",
    "getstatusoutput",
]


#: CPython's Popen and its _execute_child, as they were at import (patch()
#: changes its attributes); None where it has none (the gate refuses Popen()).
_CPYTHON_POPEN = subprocess.Popen
_CPYTHON_EXECUTE_CHILD: Callable[..., None] | None = getattr(
    subprocess.Popen, "_execute_child", None)

#: None where rdmaspawn does not know them: Popen() refuses before any use.
_INTERNALS = _cpython.current()


def _namespace() -> dict[str, Any]:
    # A copy of subprocess's globals in which the spawn primitive is ours,
    # under the name this CPython's _execute_child looks it up by.
    ns = dict(vars(subprocess))
    if _INTERNALS is not None:
        module, attr = _INTERNALS.home
        if module == "subprocess":
            ns[attr] = _forkexec.fork_exec
        else:
            ns[module] = types.SimpleNamespace(**{attr: _forkexec.fork_exec})
    return ns


_NS = _namespace()
_NS.update(zip(_execute_child.NAMES, _errpipe.CALLS))


class _FdRecorder:
    """``os`` for CPython's ``_get_handles`` (< 3.11): remembers the fds it
    makes, with the file each one is (see :func:`_close_if_still`)."""

    _local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _note(self, *fds: int) -> None:
        made = getattr(self._local, "made", None)
        if made is not None:
            st = os.fstat(fds[0])
            made.extend((fd, (st.st_dev, st.st_ino)) for fd in fds)

    def pipe(self) -> tuple[int, int]:
        fds = os.pipe()
        self._note(*fds)
        return fds

    def open(self, *args: Any, **kwargs: Any) -> int:
        fd = os.open(*args, **kwargs)
        self._note(fd)
        return fd

    @classmethod
    def begin(cls) -> list[tuple[int, tuple[int, int]]]:
        cls._local.made = []
        return cls._local.made  # type: ignore[no-any-return]

    @classmethod
    def end(cls) -> None:
        cls._local.made = None


def _close_if_still(made: list[tuple[int, tuple[int, int]]]) -> None:
    """Close each fd that is still the file it was when made (not a reused number)."""
    for fd, ident in made:
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == ident:
            os.close(fd)


_FIX_GET_HANDLES = _INTERNALS is not None and not _INTERNALS.get_handles_cleans_up
if _FIX_GET_HANDLES:
    _get_handles_recording = types.FunctionType(
        subprocess.Popen._get_handles.__code__,  # type: ignore[attr-defined]
        dict(_NS, os=_FdRecorder()), "_get_handles")


def _rebind(func: Callable[..., Any], qualname: str,
            code: types.CodeType | None = None) -> Callable[..., Any]:
    """CPython's ``func`` (with ``code`` in place of its own) run in our namespace."""
    if func.__code__.co_freevars:  # pragma: no cover - a CPython we do not know
        raise RuntimeError(f"subprocess.{func.__qualname__} has a closure; cannot rebind")
    return _execute_child.rebuilt(func, code or func.__code__, _NS, "rdmaspawn", qualname)


class Popen(_pidfd.PidfdMixin, subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen``, with every child created by rdmaspawn's engine.

    Takes every argument of ``subprocess.Popen`` of the running Python and
    behaves the same, with the same exceptions for the same causes. The child
    shares the parent's memory until it calls execve() (CLONE_VM|CLONE_VFORK),
    so memory marked MADV_DONTFORK (RDMA registrations) cannot crash it.
    ``user``, ``group`` and ``extra_groups`` are applied in that child too.

    More keyword arguments set the child up without fork, in the CLONE_VM
    child (see :mod:`rdmaspawn.preexec` for each): ``pdeathsig``,
    ``rlimits={resource: (soft, hard)}``, ``nice``, ``ioprio=(class, level)``,
    ``cpu_affinity``, ``no_new_privs``, ``ignore_signals``,
    ``default_signals``, ``signal_mask``, ``cgroup`` and ``controlling_tty``.
    ``pidfd`` is the child's pidfd, opened when first needed, where the
    kernel gives one (else None): signals go through it, so a pid that
    someone else reaped and the kernel gave to another process is never
    signalled (see ``pidfd``).

    ``preexec_fn`` values rdmaspawn recognises (its own
    :mod:`rdmaspawn.preexec` helpers, ``os.setsid``,
    ``functools.partial(os.nice, n)``, ...) run without fork too; any other
    needs fork(): it is refused with :class:`rdmaspawn.PreexecFnError` when
    the process holds MADV_DONTFORK memory, and runs as in CPython (a fork)
    when it holds none.

    A KeyboardInterrupt that arrives while it starts the child is raised
    once the child has started (at once while it waits for a ``preexec_fn``
    in a fork() child, as in CPython); as the caller then never gets the
    Popen, its child is killed and reaped and its pipes closed (see
    ``interrupts``).
    """

    def _execute_child(self, *args: Any, **kwargs: Any) -> None:
        # The first spawn's: compiling the method costs a few ms that no
        # import of rdmaspawn should pay. Later spawns call the result.
        Popen._execute_child = _execute_child_method()  # type: ignore[method-assign]
        Popen._execute_child(self, *args, **kwargs)

    def _discard(self) -> None:
        """Undo a Popen that its caller will never get: kill and reap its
        child, close its pipes (and, < 3.11, what CPython's __init__ leaks
        when it fails between _get_handles() and its own cleanup)."""
        if getattr(self, "_child_created", False) and getattr(self, "returncode", 0) is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except (ChildProcessError, ProcessLookupError):
                pass  # reaped already, by someone else
        self._close_pidfd()
        for f in (getattr(self, "stdin", None), getattr(self, "stdout", None),
                  getattr(self, "stderr", None)):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        _close_if_still(getattr(self, "_rdmaspawn_made", []))

    _posix_spawn = _posixspawn.posix_spawn_method

    def _wait(self, timeout: float | None) -> int | None:
        # CPython's called directly (a super() object costs more than the rest
        # of the call) where the mixin's has nothing to do and no subclass's is
        # in between.
        if timeout is None and not _pidfd.any_opened and type(self) is Popen:
            returncode: int | None = _CPYTHON_POPEN._wait(self, None)  # type: ignore[attr-defined]
            if _pidfd.any_opened:  # another thread opened one meanwhile
                self._close_pidfd()
            return returncode
        return super()._wait(timeout)

    if _FIX_GET_HANDLES:
        # CPython < 3.11 leaks the pipes _get_handles() made when a later one
        # fails (EMFILE): close them, as 3.11 does. It also leaks all of them
        # when __init__ fails before its try (a bad user=): _discard() does.
        def _get_handles(self, stdin: Any, stdout: Any, stderr: Any) -> Any:
            if stdin is None and stdout is None and stderr is None:
                # Nothing to make, so nothing to leak: CPython's, without
                # the recording, which every Popen([...]) would pay for.
                return _CPYTHON_POPEN._get_handles(  # type: ignore[attr-defined]
                    self, stdin, stdout, stderr)
            made = self._rdmaspawn_made = _FdRecorder.begin()
            try:
                return _get_handles_recording(self, stdin, stdout, stderr)
            except BaseException:
                _close_if_still(made)
                raise
            finally:
                _FdRecorder.end()
                if hasattr(self, "_devnull"):  # opened by _get_devnull()
                    st = os.fstat(self._devnull)
                    made.append((self._devnull, (st.st_dev, st.st_ino)))


def _execute_child_method() -> Callable[..., None]:
    """CPython's _execute_child with its error pipe in memory
    (dropin/execute_child.py), else as it is; with our globals either way."""
    cpython = _CPYTHON_EXECUTE_CHILD
    if cpython is None:  # pragma: no cover - Popen() refused before its first spawn
        _cpython.require()
        raise AssertionError("require() passed where Popen has no _execute_child")
    code = _execute_child.code(cpython)
    return _rebind(cpython, "Popen._execute_child", code)


Popen.__module__ = "rdmaspawn"
_NS["Popen"] = Popen

# The SIGINT hold as Python frames would cost more than the hold: __init__ is
# a C method (csrc/python/popen_init.c) whose face, for any other call and
# introspection, is made here from CPython's parameters (its code object:
# start-up has no inspect) plus the setup keywords.
_CPYTHON_INIT = subprocess.Popen.__init__
_NO_DEFAULT = object()  # a parameter without one: always passed on


def _init_parameters() -> tuple[tuple[str, ...], tuple[str, ...], tuple[Any, ...],
                                tuple[Any, ...]]:
    """CPython's positional parameters (self first) and keyword-only ones,
    and each one's default (:data:`_NO_DEFAULT` where it has none)."""
    code = _CPYTHON_INIT.__code__
    if code.co_flags & (_cpython.CO_VARARGS | _cpython.CO_VARKEYWORDS) or code.co_posonlyargcount:
        raise _cpython.UnsupportedPython(
            "subprocess.Popen.__init__ takes *args, **kwargs or positional-only "
            "parameters: rdmaspawn.Popen cannot pass them on")
    positional = code.co_varnames[:code.co_argcount]
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    defaults = _CPYTHON_INIT.__defaults__ or ()
    kwdefaults = _CPYTHON_INIT.__kwdefaults__ or {}
    return (positional, kwonly,
            (_NO_DEFAULT,) * (len(positional) - len(defaults)) + defaults,
            tuple(kwdefaults.get(name, _NO_DEFAULT) for name in kwonly))


try:
    _POSITIONAL, _KWONLY, _POSITIONAL_DEFAULTS, _KWONLY_DEFAULTS = _init_parameters()
    _init_error: _cpython.UnsupportedPython | None = None
except _cpython.UnsupportedPython as _exc:
    _POSITIONAL, _KWONLY, _POSITIONAL_DEFAULTS, _KWONLY_DEFAULTS = ("self",), (), (None,), ()
    _init_error = _exc
#: Every parameter after self, as __init__ hands them over, and its default.
_NAMES = _POSITIONAL[1:] + _KWONLY + tuple(SETUP_DEFAULTS)
_DEFAULTS = _POSITIONAL_DEFAULTS[1:] + _KWONLY_DEFAULTS + tuple(SETUP_DEFAULTS.values())
_REQUIRED = _POSITIONAL_DEFAULTS.count(_NO_DEFAULT) - 1


def _prepare(self: Popen, *values: Any) -> tuple[Callable[..., None], tuple[Any, ...],
                                                  dict[str, Any]]:
    """The call of the next __init__ in the MRO that any call but the plain
    one makes (popen_init.c): a subclass's instance, a setup keyword given.
    The required arguments positionally, every other one given a value that
    is not its default by name."""
    args = values[:_REQUIRED]
    kwargs = {name: value for name, value, default
              in zip(_NAMES[_REQUIRED:], values[_REQUIRED:], _DEFAULTS[_REQUIRED:])
              if value is not default}
    if not SETUP_KEYWORDS.isdisjoint(kwargs):
        # The setup travels as a preexec_fn value that fork_exec recognises.
        args, kwargs = setup_kwargs_to_preexec_fn(args, kwargs)
    return super(Popen, self).__init__, args, kwargs


def _refuse(self: Popen, *values: Any) -> None:
    """__init__'s body on a CPython whose internals rdmaspawn does not know:
    raises, before any pipe."""
    if _init_error is not None:
        raise _init_error
    _cpython.require()


def _make_init() -> Callable[..., None]:
    names = _POSITIONAL + _KWONLY + tuple(SETUP_DEFAULTS)
    source = (f"class Popen:\n"
              f" def __init__({', '.join(_POSITIONAL)}, *, {', '.join(names[len(_POSITIONAL):])}):\n"
              f"  return _init_body({', '.join(names)})\n")
    namespace: dict[str, Any] = {}
    # Compiled in this module's globals, where _init_body is looked up.
    exec(compile(source, "<rdmaspawn.Popen.__init__>", "exec"), globals(), namespace)
    init: Callable[..., None] = namespace["Popen"].__dict__["__init__"]
    init.__defaults__ = tuple(d for d in _POSITIONAL_DEFAULTS if d is not _NO_DEFAULT) or None
    init.__kwdefaults__ = {name: default for name, default
                           in zip(names[len(_POSITIONAL):], _DEFAULTS[len(_POSITIONAL) - 1:])
                           if default is not _NO_DEFAULT}
    init.__doc__ = _CPYTHON_INIT.__doc__
    init.__module__ = "rdmaspawn"
    return init


_init_body: Callable[..., None] = _refuse
if _INTERNALS is not None and _init_error is None:
    _init_body = _capi.popen_init_new(
        subprocess.Popen, Popen, _prepare,
        (len(_POSITIONAL), _KWONLY, _KWONLY_DEFAULTS, tuple(SETUP_DEFAULTS.values())),
        _signal.getsignal, _signal.raise_signal)
_init_face = _make_init()
Popen.__init__ = (  # type: ignore[method-assign]
    _init_face if _init_body is _refuse
    else _capi.popen_init_method(_init_body, _init_face, SETUP_KEYWORDS))

# The functions call each other by their global names: those are ours too.
_NS.update((name, _rebind(getattr(subprocess, name), name)) for name in __all__[1:])
run, call, check_call, check_output, getoutput, getstatusoutput = (
    _NS[name] for name in __all__[1:])
