"""The fork repair: keep libibverbs' MADV_DONTFORK marks off the pages a fork()
child needs, where the kernel copies DMA-pinned pages into it (docs/how-it-works.md)."""
from __future__ import annotations

import os
import sys
from typing import NamedTuple

from .._startup.markers import MEMFD, REPAIRED
from .._startup.repairgate import USE_MADVISE, refusal

__all__ = ["IN_FORCE", "MARKER", "ForkRepair", "USE_MADVISE", "repair_fork", "repair_state",
           "refusal", "vouches"]

#: What a process with the repair in force maps (csrc/forkrepair.c's memfd), so
#: that the doctor can tell from outside.
MARKER = MEMFD + REPAIRED

# The C core's module, loaded only where the repair starts or is asked about.
_C = "rdmaspawn._rdmaspawn_cffi"

#: What the repair does, in one line (its reason when in force; the doctor's too).
IN_FORCE = ("in force: libibverbs marks only the pages wholly inside each registration "
            "(the kernel copies none of them into a child), and earlier marks a fork() "
            "child trips on were taken off; the kernel's, the drivers' and other buffers' "
            "own marks stay")


class ForkRepair(NamedTuple):
    """Whether the fork repair is in force in this process, and why (not)."""

    #: True: libibverbs' marks are kept off the pages a fork() child needs.
    active: bool
    #: One line: why it is, or is not, in force.
    reason: str
    #: libibverbs instances whose marking was made exact.
    libraries: int = 0
    #: MADV_DONTFORK calls of libibverbs made exact (inner pages only).
    rewritten: int = 0
    #: Marked mappings a fork() child trips on, un-marked by the sweeps
    #: (marks made before a libibverbs was found).
    unmarked: int = 0
    #: Registrations left unmarked: fewer inner bytes than ``mark_min``.
    small: int = 0
    #: Registrations left unmarked: ``mark_bound`` of the repair's marks were alive.
    bounded: int = 0
    #: The inner bytes from which a registration is marked (two pages).
    mark_min: int = 0
    #: How many of the repair's marks may be alive at once (each adds up to two
    #: mappings, against ``vm.max_map_count``).
    mark_bound: int = 0


def repair_state(reason: str | None = None) -> ForkRepair:
    """The repair's state in this process, without starting it."""
    from .._rdmaspawn_cffi import ffi, lib  # here: RDMASPAWN=on loads no C unless it must

    stats = ffi.new("struct rs_repair_stats *")
    lib.rs_repair_stats(stats)
    if reason is None:
        reason = IN_FORCE if stats.active else "not started (rdmaspawn.repair_fork() starts it)"
    return ForkRepair(bool(stats.active), reason, int(stats.libraries),
                      int(stats.rewritten), int(stats.unmarked), int(stats.small),
                      int(stats.bounded), int(stats.mark_min), int(stats.mark_bound))


def vouches(start: int, end: int) -> bool:
    """Whether the marked range [start, end) is one the repair in force here made
    itself (the inner pages of a registration: nothing a fork() child needs).
    False where the repair's C was never loaded."""
    core = sys.modules.get(_C)
    return core is not None and bool(core.lib.rs_repair_exact(start, end))


def repair_fork() -> ForkRepair:
    """Make ``fork()`` safe in this process where the kernel allows it.

    Where the kernel reports over RDMA netlink that it copies DMA-pinned
    pages at fork (Linux 5.13 and later with an RDMA driver loaded) and
    ``RDMAV_USE_MADVISE`` is unset: libibverbs' ``MADV_DONTFORK`` marks,
    present and future, are kept off the pages a fork() child needs (a
    registration's inner pages stay marked, so none is copied into it), and the
    result is ``active``. Anywhere else nothing changes, and ``reason`` says
    why in one line. Calling it again is harmless. Never raises for a
    refusal: a job calls it and carries on either way.
    """
    why_not = refusal()
    if why_not is not None:
        if _C not in sys.modules:  # never started: no C to load to say so
            return ForkRepair(False, why_not)
        current = repair_state()
        return current if current.active else current._replace(reason=why_not)
    from .._rdmaspawn_cffi import lib

    rc = lib.rs_repair_start()
    if rc < 0:
        return repair_state(
            "in force, but one libibverbs could not be rewritten "
            f"({os.strerror(-rc)}): its marks stay; the rest are repaired")
    return repair_state()


def start_without_asking() -> ForkRepair:
    """The mechanism without the kernel's word: for tests on hosts without
    RDMA netlink, where marks made without registering are safe to take off."""
    from .._rdmaspawn_cffi import lib

    lib.rs_repair_start()
    return repair_state()
