"""libibverbs' fork protection as the C core asks it (``rs_fork_status``, ``rs_fork_init``)."""
from __future__ import annotations

import errno as _errno
import os
from typing import NamedTuple

from .._rdmaspawn_cffi import ffi, lib
from . import forkrepair as _forkrepair

__all__ = ["ForkInitError", "ForkStatus", "fork_init", "fork_status"]

_STATES = {
    lib.RS_FORK_UNAVAILABLE: "unavailable",
    lib.RS_FORK_DISABLED: "disabled",
    lib.RS_FORK_ENABLED: "enabled",
    lib.RS_FORK_UNNEEDED: "unneeded",
    lib.RS_FORK_UNKNOWN: "unknown",
}


class ForkInitError(OSError):
    """ibv_fork_init() failed; for EINVAL, memory was registered before it."""


class ForkStatus(NamedTuple):
    """libibverbs fork protection: ``state`` and the library that was asked.

    state is one of "unavailable" (no libibverbs), "disabled" (ibv_fork_init
    has not run: nothing is marked), "enabled" (registrations are marked
    MADV_DONTFORK), "unneeded" (the kernel copies pinned pages at fork and the
    library marks nothing), "unknown" (rdma-core < 35 cannot say, and nothing
    marked shows it: another library's ibv_fork_init() may have run). The
    state says what the library does, not only what it answers: rdma-core
    35-50 answer "unneeded" on a copy-on-fork kernel and still mark once fork
    protection is on, and that is "enabled" here (see csrc/forkinit.c).

    repair is the fork repair's (:func:`rdmaspawn.repair_fork`): "repaired"
    (in force: libibverbs' marks are kept off the pages a fork child needs,
    and on a registration's inner pages), "repairable"
    (the kernel copies pinned pages at fork; not started), or "not
    repairable" (the kernel does not say so, or RDMAV_USE_MADVISE is set:
    marks stay and protect).
    """

    state: str
    library: str | None
    repair: str = "not repairable"


def _status(init: bool) -> tuple[int, str | None, int]:
    path = ffi.new("char[]", 4096)
    err = ffi.new("int *")
    state = lib.rs_fork_init(path, 4096, err) if init else lib.rs_fork_status(path, 4096)
    return state, ffi.string(path).decode(errors="surrogateescape") or None, err[0]


def _repair_word() -> str:
    if _forkrepair.repair_state().active:
        return "repaired"
    return "repairable" if _forkrepair.refusal() is None else "not repairable"


def fork_status() -> ForkStatus:
    """Report libibverbs' fork protection for this process (see :class:`ForkStatus`)."""
    state, library, _ = _status(False)
    return ForkStatus(_STATES[state], library, _repair_word())


def fork_init() -> ForkStatus:
    """Turn on libibverbs' fork protection, correctly.

    Asks the libibverbs instance the process already has loaded (the one
    NCCL, pyverbs or UCX registered memory with), else loads the system's.
    Does nothing when there is no libibverbs ("unavailable") or when the
    kernel copies pinned pages at fork ("unneeded"), and nothing more once
    enabled: calling it again is harmless. Raises :class:`ForkInitError` when
    ibv_fork_init() fails; EINVAL means memory was registered before the call.
    """
    state, library, err = _status(True)
    if err == _errno.EINVAL:
        raise ForkInitError(
            err,
            "ibv_fork_init() refused: memory was already registered with "
            f"libibverbs ({library}) before fork protection was turned on. "
            "Call rdmaspawn.fork_init() before any memory registration (before "
            "NCCL, UCX or pyverbs open a device), or set RDMAV_FORK_SAFE=1 in "
            "the environment before the process starts",
        )
    if err:
        raise ForkInitError(err, f"ibv_fork_init() failed: {os.strerror(err)}")
    return ForkStatus(_STATES[state], library, _repair_word())
