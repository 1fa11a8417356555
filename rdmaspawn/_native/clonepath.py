"""Which system call starts this process's children, and ``RDMASPAWN_CLONE``.

The engine starts a child with clone3() where the kernel allows it, else
glibc's clone(); ``RDMASPAWN_CLONE=clone`` (read once, inherited) forces
clone(), so that tests and CI run both paths on one kernel. Any other value
than ``auto`` is reported once (a RuntimeWarning) and treated as ``auto``.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import NamedTuple

from .._rdmaspawn_cffi import lib

__all__ = ["VARIABLE", "ClonePath", "apply_variable", "clone_path"]

#: The environment variable that forces the fallback.
VARIABLE = "RDMASPAWN_CLONE"
_VALUES = ("auto", "clone")


class ClonePath(NamedTuple):
    """How this process's spawns start children.

    ``method``: ``"clone3"``, ``"clone"``, or ``"untried"`` while no spawn
    has yet asked the kernel for clone3(); ``reason``: why, in words.
    """

    method: str
    reason: str


_PATHS = {
    lib.RS_PATH_UNTRIED: ClonePath(
        "untried", "no spawn yet in this process: clone3() will be tried first"),
    lib.RS_PATH_CLONE3: ClonePath(
        "clone3", "clone3() with CLONE_CLEAR_SIGHAND: the kernel resets the child's "
                  "signal handlers"),
    lib.RS_PATH_CLONE_REFUSED: ClonePath(
        "clone", "glibc clone(): the kernel refused clone3() (Linux < 5.5, a seccomp "
                 "filter, valgrind or qemu-user); the child resets its signal handlers"),
    lib.RS_PATH_CLONE_FORCED: ClonePath(
        "clone", f"glibc clone(), forced by {VARIABLE}=clone; the child resets its "
                 "signal handlers"),
}


def apply_variable(environ: Mapping[str, str]) -> None:
    """Apply ``RDMASPAWN_CLONE`` from ``environ`` (the engine's import does, once)."""
    value = environ.get(VARIABLE, "auto").strip().lower() or "auto"
    if value not in _VALUES:
        warnings.warn(f"{VARIABLE}={environ[VARIABLE]!r} is not one of {', '.join(_VALUES)}: "
                      "ignored (clone3() where the kernel allows it)", RuntimeWarning,
                      stacklevel=3)
    elif value == "clone":
        lib.rs_force_clone_fallback()


def clone_path() -> ClonePath:
    """The path this process's spawns take now (see :class:`ClonePath`)."""
    return _PATHS[lib.rs_clone_path()]
