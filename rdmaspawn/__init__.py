"""rdmaspawn: start child processes safely from processes that hold RDMA memory.

``from rdmaspawn import Popen`` is ``subprocess.Popen`` with every child
created by a CLONE_VM|CLONE_VFORK engine that never copies the parent's page
tables, so memory that libibverbs marked MADV_DONTFORK cannot go missing in
the child. ``import rdmaspawn as subprocess`` works for the common API.
``rdmaspawn.patch()`` routes the standard library's own spawns through it.
"""
from __future__ import annotations

# First: a source tree without its build fails here, in one line that says
# what to do, rather than deep inside an import chain.
from . import _sourcetree  # noqa: F401  # isort: skip
from subprocess import (
    DEVNULL,
    PIPE,
    STDOUT,
    CalledProcessError,
    CompletedProcess,
    SubprocessError,
    TimeoutExpired,
)
from typing import Any

from . import preexec
from ._engine import ForkInitError, ForkStatus, SpawnError, fork_init, fork_status, spawn
from ._setup_pack import ChildSetupError
from .dropin.forkexec import PreexecFnError
from .dropin.patch import is_patched, patch, patched, unpatch
from .dropin.popen import (
    Popen,
    call,
    check_call,
    check_output,
    getoutput,
    getstatusoutput,
    run,
)

__version__ = "0.1.0"

__all__ = [
    "Popen", "run", "call", "check_call", "check_output", "getoutput",
    "getstatusoutput", "PIPE", "STDOUT", "DEVNULL", "CompletedProcess",
    "SubprocessError", "CalledProcessError", "TimeoutExpired",
    "patch", "unpatch", "patched", "is_patched",
    "fork_init", "fork_status", "ForkStatus", "ForkInitError",
    "spawn", "SpawnError", "PreexecFnError", "ChildSetupError", "preexec", "pty_spawn",
    "doctor", "guard", "unguard", "guarded", "is_guarded", "ForkHazardError",
    "ForkHazardWarning", "get_context",
]

# The user tools load on first use: importing rdmaspawn stays cheap.
_LAZY = {"pty_spawn": ".ptyspawn", "doctor": ".tools.doctor", "guard": ".tools.guard",
         "unguard": ".tools.guard", "guarded": ".tools.guard", "is_guarded": ".tools.guard",
         "ForkHazardError": ".tools.guard", "ForkHazardWarning": ".tools.guard",
         # Imports multiprocessing, which most users of rdmaspawn never need.
         "get_context": ".dropin.startmethod"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name], __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
