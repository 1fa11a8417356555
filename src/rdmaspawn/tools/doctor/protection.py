"""In words a user acts on: does libibverbs mark DONTFORK here, and what removes that?

The situations, in the order they are tried (first match wins):

=============  ===============================================================
case           when
=============  ===============================================================
no-verbs       no libibverbs in the process nor on the machine
unneeded       libibverbs said "unneeded", or: kernel >= 5.13, rdma-core >= 35
               and RDMA netlink answered copy-on-fork
use-madvise    as "unneeded" but RDMAV_USE_MADVISE is set: it marks anyway
kernel-old     the kernel is older than 5.13 (or its netlink says no
               copy-on-fork): marking is needed and the hazard is real
verbs-old      kernel >= 5.13 but rdma-core < 35: it never asks the kernel
cannot-ask     kernel >= 5.13, rdma-core >= 35, but RDMA netlink cannot be
               asked (ib_core not loaded): it falls back to marking
=============  ===============================================================

The facts and their sources are in :mod:`.facts`.
"""

from __future__ import annotations

import dataclasses

from .facts import COPY_ON_FORK_KERNEL, RDMA_CORE_ASKS_KERNEL

__all__ = ["Protection", "VerbsFacts", "judge_protection"]

_KERNEL = ".".join(map(str, COPY_ON_FORK_KERNEL))
_UNTIL = "until then start children with rdmaspawn"


@dataclasses.dataclass(frozen=True)
class VerbsFacts:
    """What the doctor learnt about libibverbs and the kernel."""

    kernel: str
    kernel_copies: bool | None
    verbs_path: str | None
    rdma_core: int | None
    netlink_copy_on_fork: bool | None
    netlink_note: str
    fork_status: str | None = None
    use_madvise: bool = False


@dataclasses.dataclass(frozen=True)
class Protection:
    """The case (see the module's table) and the sentence that says it."""

    case: str
    text: str
    #: Whether libibverbs marks registrations DONTFORK once fork protection is on.
    marks: bool


def _verbs_name(f: VerbsFacts) -> str:
    if f.rdma_core is None:
        return "libibverbs (release unknown)"
    return f"the libibverbs of rdma-core {f.rdma_core}"


def judge_protection(f: VerbsFacts) -> Protection:
    """Pick the case for these facts and say it."""
    kernel = f"this kernel ({f.kernel})"
    if f.verbs_path is None and f.fork_status in (None, "unavailable"):
        return Protection("no-verbs", "libibverbs is not installed here, so it marks nothing; "
                          "MADV_DONTFORK memory, if any, comes from code that calls madvise() "
                          "itself", False)
    verbs = _verbs_name(f)
    asks = f.rdma_core is None or f.rdma_core >= RDMA_CORE_ASKS_KERNEL
    answered = f.netlink_copy_on_fork is True
    if f.fork_status == "unneeded" or (f.kernel_copies and asks and answered):
        if f.use_madvise:
            return Protection("use-madvise", f"{kernel} copies DMA-pinned pages at fork and "
                              f"{verbs} knows it, but RDMAV_USE_MADVISE is set, so "
                              "ibv_fork_init() marks registrations DONTFORK anyway: unset it to "
                              f"remove the hazard at its root; {_UNTIL}", True)
        return Protection("unneeded", f"{kernel} copies DMA-pinned pages at fork and {verbs} "
                          "asked it: libibverbs marks nothing (fork status 'unneeded'); "
                          "MADV_DONTFORK memory, if any, comes from code that calls madvise() "
                          "itself", False)
    if not f.kernel_copies or f.netlink_copy_on_fork is False:
        return Protection("kernel-old", f"{kernel} does not copy DMA-pinned pages at fork, so "
                          f"with fork protection on (ibv_fork_init(), RDMAV_FORK_SAFE) {verbs} "
                          "must mark registrations DONTFORK and a fork() child loses those "
                          f"pages: Linux >= {_KERNEL} with rdma-core >= {RDMA_CORE_ASKS_KERNEL} "
                          f"removes the hazard at its root; {_UNTIL}", True)
    if not asks:
        return Protection("verbs-old", f"{kernel} copies DMA-pinned pages at fork, but {verbs} "
                          "does not ask it and marks DONTFORK anyway: upgrade rdma-core to "
                          f"{RDMA_CORE_ASKS_KERNEL} or later to remove the hazard at its root; "
                          f"{_UNTIL}", True)
    return Protection("cannot-ask", f"{kernel} copies DMA-pinned pages at fork and {verbs} "
                      f"would ask it, but cannot here ({f.netlink_note}), so ibv_fork_init() "
                      "still marks registrations DONTFORK: on a node whose RDMA driver is "
                      "loaded (it loads ib_core) libibverbs marks nothing; "
                      f"{_UNTIL}", True)
