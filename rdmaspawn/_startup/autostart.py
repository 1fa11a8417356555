"""Apply ``RDMASPAWN`` at interpreter start (called by the ``rdmaspawn-autostart.pth`` hook).

site.py runs the hook's one line for every interpreter that processes
site-packages (not under ``python -S``). The line itself only looks the
variable up, so an interpreter without it pays for one dictionary lookup;
with it set, the line imports this module and calls :func:`start`, and turns
any import failure (a broken install) into one line on stderr.

This is an entry point like ``__main__``: it sits above the tools it applies.
site.py runs ``.pth`` files before ``sitecustomize`` and ``PYTHONSTARTUP``, so
a user's own start-up code runs after this and can change what it did.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

from .onimport import after_subprocess, when_imported
from .switch import VARIABLE, Settings, parse

__all__ = ["start", "apply"]

# site.py processes a venv's site-packages twice (3.9-3.13), and the hook with it.
_started = False


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"rdmaspawn: {line}\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass  # no usable stderr (pythonw-like embedding, closed fd 2): stay silent


def apply(settings: Settings) -> list[str]:
    """Do what ``settings`` asks in this process; return what was done, in words."""
    done: list[str] = []
    if settings.patch:
        if "subprocess" in sys.modules:
            from ..dropin.patch import patch

            patch()
        else:
            _patch_with_subprocess()
        done.append("patch()")
    if settings.guard is not None:
        from ..tools.guard import guard

        guard(settings.guard)  # with Pool's worker handler (see dropin.poolhandler)
        done.append(f"guard({settings.guard!r})")
    repaired = False
    if settings.repair:
        from .._native.forkrepair import repair_fork  # no C unless the kernel says yes

        result = repair_fork()
        repaired = result.active
        done.append("repair_fork(): in force" if repaired
                    else f"repair_fork() refused: {result.reason}")
    if settings.start_method is not None and repaired:
        done.append(f"multiprocessing's default start method left as it is ({settings.start_method} "
                    "is the fallback where the fork repair cannot apply)")
    elif settings.start_method is not None:
        from ..dropin.startmethod import prefer_start_method

        method = settings.start_method
        when_imported("multiprocessing.context",
                      lambda _: _safely(lambda: _prefer(prefer_start_method, method),
                                        "the default start method"))
        done.append(f"multiprocessing's default start method is {method}")
    return done


def _patch_with_subprocess() -> None:
    """``patch()`` once the program imports subprocess, not at start-up.

    subprocess and the engine were most of what ``on`` cost an interpreter
    at start-up (``python -m rdmaspawn.bench.startup`` measures it), and
    every child the standard library starts comes after that import:
    ``subprocess.Popen``, ``os.popen``, asyncio's and multiprocessing's all
    import it first (a bare ``_posixsubprocess`` brings it, see
    ``after_subprocess``). ``os.spawn*`` does not: its ``os._spawnvef``
    stands in until then, and imports subprocess at its first call.
    """
    original = getattr(os, "_spawnvef", None)

    def spawnvef(*args: object) -> object:
        if getattr(os, "_spawnvef", None) is spawnvef:
            os._spawnvef = original  # type: ignore[attr-defined]
        import subprocess  # noqa: F401  # patch() comes with it
        return os._spawnvef(*args)  # type: ignore[attr-defined]

    def patch_now(_: object) -> None:
        if getattr(os, "_spawnvef", None) is spawnvef:
            os._spawnvef = original  # type: ignore[attr-defined]
        from ..dropin.patch import patch

        _safely(patch, "patch()")

    if original is not None:
        os._spawnvef = spawnvef  # type: ignore[attr-defined]
    after_subprocess(patch_now)


def _safely(fn: Callable[[], None], what: str) -> None:
    """Run a deferred step inside the user's import: never break it."""
    try:
        fn()
    except Exception as exc:
        _say(f"{VARIABLE}: could not adjust {what}: {type(exc).__name__}: {exc}")


def _prefer(prefer: Callable[[str], object], method: str) -> None:
    if prefer(method) is None:  # something chose before us (cannot happen at start-up)
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
