"""In words a user acts on: does libibverbs mark DONTFORK here, and what removes that?

:func:`judge_protection` tries the cases in order, first match wins: no-verbs,
kernel-old, verbs-old, unneeded, cannot-ask. The facts and their sources are in
:mod:`.facts`.
"""

from __future__ import annotations

import dataclasses
import platform

from ..._host.rdmanetlink import rdma_netlink_copy_on_fork
from .facts import (
    COPY_ON_FORK_KERNEL,
    RDMA_CORE_SKIPS_MARKING,
    kernel_copies_pinned_pages,
    rdma_core_version,
)

__all__ = ["Protection", "VerbsFacts", "judge_protection", "verbs_facts"]

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


def verbs_facts(verbs_path: str | None, fork_status: str | None) -> VerbsFacts:
    """This machine's facts, for the libibverbs found and its fork status."""
    cof, note = rdma_netlink_copy_on_fork()
    return VerbsFacts(platform.release(), kernel_copies_pinned_pages(), verbs_path,
                      rdma_core_version(verbs_path), cof, note, fork_status)


@dataclasses.dataclass(frozen=True)
class Protection:
    """The case (see :func:`judge_protection`) and the sentence that says it."""

    case: str
    text: str
    #: Whether libibverbs marks registrations DONTFORK once fork protection is on.
    marks: bool


def judge_protection(f: VerbsFacts) -> Protection:
    """Pick the case for these facts and say it."""
    kernel = f"this kernel ({f.kernel})"
    if f.verbs_path is None and f.fork_status in (None, "unavailable"):
        return Protection("no-verbs", "libibverbs is not installed here, so it marks nothing; "
                          "MADV_DONTFORK memory, if any, comes from code that calls madvise() "
                          "itself", False)
    verbs = ("libibverbs (release unknown)" if f.rdma_core is None
             else f"the libibverbs of rdma-core {f.rdma_core}")
    if not f.kernel_copies or f.netlink_copy_on_fork is False:
        return Protection("kernel-old", f"{kernel} does not copy DMA-pinned pages at fork, so "
                          f"with fork protection on (ibv_fork_init(), RDMAV_FORK_SAFE) {verbs} "
                          "must mark registrations DONTFORK and a fork() child loses those "
                          f"pages: Linux >= {_KERNEL} with rdma-core >= {RDMA_CORE_SKIPS_MARKING} "
                          f"removes the hazard at its root; {_UNTIL}", True)
    if f.rdma_core is not None and f.rdma_core < RDMA_CORE_SKIPS_MARKING:
        return Protection("verbs-old", f"{kernel} copies DMA-pinned pages at fork, but {verbs} "
                          "marks registrations DONTFORK anyway once ibv_fork_init() has run: "
                          f"upgrade rdma-core to {RDMA_CORE_SKIPS_MARKING} or later to remove "
                          f"the hazard at its root; {_UNTIL}", True)
    if f.fork_status == "unneeded" or f.netlink_copy_on_fork is True:
        return Protection("unneeded", f"{kernel} copies DMA-pinned pages at fork and {verbs} "
                          "asked it: libibverbs marks nothing (fork status 'unneeded'); "
                          "MADV_DONTFORK memory, if any, comes from code that calls madvise() "
                          "itself", False)
    return Protection("cannot-ask", f"{kernel} copies DMA-pinned pages at fork and {verbs} "
                      f"would ask it, but cannot here ({f.netlink_note}), so ibv_fork_init() "
                      "still marks registrations DONTFORK: on a node whose RDMA driver is "
                      "loaded (it loads ib_core) libibverbs marks nothing; "
                      f"{_UNTIL}", True)
