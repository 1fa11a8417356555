"""rdmaspawn: start child processes safely from processes that hold RDMA memory.

``from rdmaspawn import Popen`` is ``subprocess.Popen`` with every child
created by a CLONE_VM|CLONE_VFORK engine that never copies the parent's page
tables, so memory that libibverbs marked MADV_DONTFORK cannot go missing in
the child. ``import rdmaspawn as subprocess`` works for the common API.
``rdmaspawn.patch()`` routes the standard library's own spawns through it.
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.
# First: a source tree without its build fails here, in one line that says
# what to do, rather than deep inside an import chain.
from ._startup import sourcetree as _sourcetree  # isort: skip

# typing's import would cost every interpreter under RDMASPAWN more than all
# of the start-up hook (python -m rdmaspawn.bench.startup): mypy reads this name.
TYPE_CHECKING = False
if TYPE_CHECKING:
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
    from ._child.pack import ChildSetupError
    from ._native.engine import SpawnError, spawn
    from ._native.forkrepair import ForkRepair, repair_fork
    from ._native.forkstatus import ForkInitError, ForkStatus, fork_init, fork_status
    from .dropin.forkexec import PreexecFnError
    from .dropin.patch import get_context, is_patched, patch, patched, unpatch
    from .dropin.popen import getoutput, getstatusoutput

    # CPython's signatures with rdmaspawn's keywords (scripts/subprocess-stub).
    from .dropin.signatures import Popen, call, check_call, check_output, run
    from .ptyspawn import pty_spawn
    from .tools.doctor import doctor
    from .tools.guard import (
        ForkHazardError,
        ForkHazardWarning,
        guard,
        is_guarded,
        unguard,
    )
    from .tools.guarded import guarded

__version__ = "0.1.0"

__all__ = [
    "Popen", "run", "call", "check_call", "check_output", "getoutput",
    "getstatusoutput", "PIPE", "STDOUT", "DEVNULL", "CompletedProcess",
    "SubprocessError", "CalledProcessError", "TimeoutExpired",
    "patch", "unpatch", "patched", "is_patched",
    "fork_init", "fork_status", "ForkStatus", "ForkInitError", "repair_fork", "ForkRepair",
    "spawn", "SpawnError", "PreexecFnError", "ChildSetupError", "preexec", "pty_spawn",
    "doctor", "guard", "unguard", "guarded", "is_guarded", "ForkHazardError",
    "ForkHazardWarning", "get_context",
]

# Names load on first use (PEP 562): RDMASPAWN's start-up hook imports this
# package in every interpreter of a job, most of which never spawn, so there
# subprocess and the engine wait for the program's own first spawn. A
# program's own import loads the drop-in at once (see the end of this file).
_HOMES = {
    "subprocess": ("DEVNULL", "PIPE", "STDOUT", "CalledProcessError", "CompletedProcess",
                   "SubprocessError", "TimeoutExpired"),
    "._child.pack": ("ChildSetupError",),
    "._native.engine": ("SpawnError", "spawn"),
    "._native.forkstatus": ("ForkInitError", "ForkStatus", "fork_init", "fork_status"),
    "._native.forkrepair": ("ForkRepair", "repair_fork"),
    ".dropin.forkexec": ("PreexecFnError",),
    ".dropin.patch": ("get_context", "is_patched", "patch", "patched", "unpatch"),
    ".dropin.popen": ("getoutput", "getstatusoutput", "Popen", "call", "check_call",
                      "check_output", "run"),
    ".ptyspawn": ("pty_spawn",),
    ".tools.doctor": ("doctor",),
    ".tools.guard": ("guard", "unguard", "is_guarded", "ForkHazardError",
                     "ForkHazardWarning"),
    ".tools.guarded": ("guarded",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}
# What a program's own `import rdmaspawn` loads at once; the tools load on use.
_DROPIN = ("subprocess", "._child.pack", "._native.engine", ".dropin.forkexec",
           ".dropin.patch", ".dropin.popen")


def __getattr__(name: str) -> "Any":
    import importlib

    if name == "preexec":
        value: Any = importlib.import_module(".preexec", __name__)
    elif name in _HOME:
        value = getattr(importlib.import_module(_HOME[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# As `import subprocess` loads subprocess: a program may drop privileges or
# chroot right after its imports, and find the library out of its reach.
if not _sourcetree.imported_by_site():
    for _name in ("preexec", *(n for m in _DROPIN for n in _HOMES[m])):
        __getattr__(_name)
    del _name
