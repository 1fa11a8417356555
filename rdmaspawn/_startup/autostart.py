"""Apply ``RDMASPAWN`` at interpreter start (called by the ``rdmaspawn-autostart.pth`` hook).

Every interpreter of a job pays for what runs here, so it loads almost
nothing: the patch and the guard load at the first spawn or fork. It runs
before ``sitecustomize``, so a user's own start-up code can change what it did.
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.
import os
import sys

from . import standin
from .onimport import when_imported
from .switch import VARIABLE, Settings, parse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

__all__ = ["start", "apply"]

# The deferred steps import by absolute name: they may run while another
# thread imports the same module, and a relative import does not wait for it
# on CPython 3.9.2 (Debian 11), finding the module partly initialized.

# site.py processes a venv's site-packages twice (3.9-3.13), and the hook with it.
_started = False


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"rdmaspawn: {line}\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass  # no usable stderr (pythonw-like embedding, closed fd 2): stay silent


def apply(settings: "Settings") -> list[str]:
    """Do what ``settings`` asks in this process; return what was done, in words."""
    done: list[str] = []
    if settings.patch:
        done.append("patch()")
        # In force from here on (the stand-ins route every spawn to it): say so
        # to the doctor now, not at the first spawn.
        _safely(lambda: _marker("set_patched", True), "the doctor's marker")
    if settings.guard is not None:
        mode = settings.guard
        # os.fork's part at the first fork; fork_exec's comes with the patch's (_settle).
        standin.install_forks(lambda placed: _settle_forks(mode, placed))
        _safely(lambda: _marker("set_guard", mode), "the doctor's marker")
        # A fork refused in a Pool's worker handler must fail the job, not hang it.
        when_imported("multiprocessing.pool",
                      lambda _: _safely(_pool_handler, "multiprocessing.Pool"))
        done.append(f"guard({settings.guard!r})")
    if settings.patch or settings.guard is not None:
        standin.install(lambda placed: _settle(settings, placed), patch=settings.patch)
    repaired = False
    if settings.repair:
        # no C, no typing, no socket, unless it may
        from rdmaspawn._startup.repairgate import refusal

        why_not = refusal()
        if why_not is None:
            from rdmaspawn._native.forkrepair import repair_fork

            result = repair_fork()
            repaired, why_not = result.active, result.reason
        done.append("repair_fork(): in force" if repaired
                    else f"repair_fork() refused: {why_not}")
    if settings.start_method is not None and repaired:
        done.append(f"multiprocessing's default start method left as it is ({settings.start_method} "
                    "is the fallback where the fork repair cannot apply)")
    elif settings.start_method is not None:
        method = settings.start_method
        when_imported("multiprocessing.context",
                      lambda _: _safely(lambda: _prefer(method), "the default start method"))
        done.append(f"multiprocessing's default start method is {method}")
    return done


def _settle(settings: "Settings", placed: "list[tuple[Any, str, Any, Any]]") -> None:
    """What the stand-ins stood for, at the first spawn (or ``dropin.patch``'s
    import): each taken out of its place, then ``patch()`` and the guard of
    fork_exec, in that order, as if applied at ``import subprocess``."""
    try:
        from rdmaspawn.dropin import wrapping

        for owner, attr, stand, original in placed:
            if wrapping.splice_out(owner, attr, stand, original):
                standin.took_out(stand)
        if settings.patch:
            from rdmaspawn.dropin.patch import patch

            _safely(patch, "patch()")
            from rdmaspawn.dropin.patch import is_patched

            if not is_patched():  # the marker set at start-up would say otherwise
                _safely(lambda: _marker("set_patched", False), "the doctor's marker")
        if settings.guard is not None:
            from rdmaspawn.tools.guard import guard_exec

            _safely(guard_exec, "the guard of fork_exec")
    except Exception as exc:  # the spawn goes ahead unpatched: said to the user and the doctor
        _not_protected(exc)


def _not_protected(exc: Exception) -> None:
    """The patch could not load here (a sub-interpreter cannot load the core,
    a single-phase extension module; a broken install): one line says so,
    and the patch's marker says why."""
    sub = _in_subinterpreter()
    where = "this sub-interpreter" if sub else "this interpreter"
    _say(f"{VARIABLE}: could not load the patch ({type(exc).__name__}: {exc}): "
         f"the children {where} starts are not protected")
    reason = "subinterpreter" if sub else "load-failed"
    _safely(lambda: _marker("set_unprotected", reason), "the doctor's marker")


def _in_subinterpreter() -> bool:
    try:
        import _interpreters as interpreters  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        try:
            import _xxsubinterpreters as interpreters  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            return False  # none to be in
    return bool(interpreters.get_current() != interpreters.get_main())


def _settle_forks(mode: str, placed: "list[tuple[Any, str, Any, Any]]") -> bool:
    """What the stand-ins of os.fork stood for, at the first fork (or the
    first use of ``tools.guard``): each taken out of its place, then
    ``guard_forks(mode)``. False where the guard cannot be imported now."""
    try:
        from rdmaspawn.tools.guard import guard_below, guard_forks
    except (ImportError, OSError) as exc:
        if sys.meta_path is None:
            return False  # at shutdown: no import, a failed look
        import errno

        if getattr(exc, "errno", None) in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            return False  # no descriptor or memory left: a failed look, for now
        _say(f"{VARIABLE}: could not load the guard: {type(exc).__name__}: {exc}")
        return True
    try:
        for owner, attr, stand, original in placed:
            if getattr(owner, attr, None) is stand:  # on top still: no need of wrapping's typing
                setattr(owner, attr, original)
                standin.took_out(stand)
                continue
            from rdmaspawn.dropin import wrapping

            if wrapping.splice_out(owner, attr, stand, original):
                standin.took_out(stand)
            else:  # held by a wrapper without __wrapped__ (gevent's): guarded below it too
                guard_below(stand, attr)
        guard_forks(mode)
    except Exception as exc:  # a broken install: forks go ahead unguarded, as before
        _say(f"{VARIABLE}: could not load the guard: {type(exc).__name__}: {exc}")
    return True


def _marker(setter: str, value: "Any") -> None:
    from rdmaspawn._startup import markers

    getattr(markers, setter)(value)


def _pool_handler() -> None:
    from rdmaspawn.dropin import poolhandler

    poolhandler.install_when_imported()


def _safely(fn: "Callable[[], None]", what: str) -> None:
    """Run a deferred step inside the user's import or spawn: never break it."""
    try:
        fn()
    except Exception as exc:
        _say(f"{VARIABLE}: could not adjust {what}: {type(exc).__name__}: {exc}")


def _prefer(method: str) -> None:
    from rdmaspawn.dropin.startmethod import prefer_start_method

    if prefer_start_method(method) is None:  # something chose before us (cannot happen at start-up)
        _say(f"multiprocessing's start method was chosen before {VARIABLE} could apply "
             f"{method}: left as it is")


def start() -> None:
    """Read ``RDMASPAWN`` and apply it; every problem is one line on stderr, never a traceback.

    Only the first call in a process does anything.
    """
    global _started
    if _started:
        return
    _started = True
    value = os.environ.get(VARIABLE, "")
    settings, problems = parse(value)
    for problem in problems:
        _say(problem)
    try:
        done = apply(settings)
    except Exception as exc:  # a bug or a broken install: never stop the interpreter
        _say(f"{VARIABLE}={value!r} failed: {type(exc).__name__}: {exc}")
        return
    if settings.verbose:
        what = "; ".join(done) or "nothing to do"
        _say(f"{VARIABLE}={value!r} in pid {os.getpid()} ({sys.executable}): {what}")
