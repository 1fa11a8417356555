"""What the guard reads at a fork: what a fork() child would trip on, what to
tell the caller, and whether a ``fork_exec`` call forks at all.

Imported at the first fork, so that an interpreter that never forks never
loads it. ``OSError`` or ``ImportError`` here is a failed look: the fork goes ahead.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .._host.forkrisk import own_hazards
from .._host.procfs import has_dontfork, read_proc
from . import devicememo

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._host.procfs import Mapping

__all__ = ["hazards_now", "hazards_after_fork", "message", "fork_exec_forks"]


def hazards_now() -> list[Mapping]:
    """Before a fork: what in this process a child would lack and trip on (the doctor's
    rule, less the fork repair's own exact marks: ``_host.forkrisk.own_hazards``)."""
    if not has_dontfork():
        return []
    return [f.mapping for f in own_hazards(read_proc("self", "smaps"))]


def hazards_after_fork(left_out: int) -> list[Mapping]:
    """A held child lacks ``left_out`` pages (-1: unknown): what they are,
    unless they are the device memory already seen (:mod:`.devicememo`)."""
    if devicememo.explains(left_out):
        return []
    data = read_proc("self", "smaps")
    devicememo.learn(data)
    return [f.mapping for f in own_hazards(data)]


def message(what: str, maps: Sequence[Mapping]) -> str:
    """The warning's or the refusal's text: what would fork, over what, and what to use."""
    shown = "; ".join(m.describe() for m in maps[:5])
    if len(maps) > 5:
        shown += f"; and {len(maps) - 5} more"
    # patch() in force already: advise only what is left to do (looked up
    # where it is loaded: importing it would load subprocess into a process
    # that may never spawn, or fail at shutdown).
    patched = sys.modules.get("rdmaspawn.dropin.patch")
    spawners = ("rdmaspawn.Popen" if patched is not None and patched.is_patched()
                else "rdmaspawn.Popen or rdmaspawn.patch()")
    return (
        f"{what} would fork() a process that holds MADV_DONTFORK memory ({shown}): the child does not "
        f"get those pages and may die with SIGSEGV before exec. Use {spawners} "
        "without preexec_fn, or multiprocessing 'spawn'/'forkserver'."
    )


def fork_exec_forks(args: tuple[Any, ...], preexec_only: bool) -> bool:
    """Whether this call of the wrapped fork_exec will fork() (see :mod:`.guard`)."""
    from .._child.recognize import as_setup
    from ..dropin import cpython as _cpython

    try:
        call = _cpython.unpack_fork_exec(args)
    except TypeError:
        return False  # a wrong argument count: the callee raises
    except _cpython.UnsupportedPython:
        return True  # a CPython we do not know: assume the worst
    if preexec_only and call.preexec_fn is not None and as_setup(call.preexec_fn) is not None:
        return False  # the engine runs the preexec_fn values it recognises without fork
    return _cpython.fork_exec_forks(call, preexec_only)
