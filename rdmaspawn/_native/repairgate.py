"""Whether the fork repair may run in this process: the one rule, without the repair.

RDMASPAWN's start-up asks this in every interpreter of a job, and on most
hosts the answer is no; :mod:`.forkrepair` (the repair itself, its result
type, the C core) loads only where it is yes.
"""
from __future__ import annotations

import os

from .._host.rdmanetlink import rdma_netlink_copy_on_fork

__all__ = ["USE_MADVISE", "refusal"]

#: rdma-core's variable for "mark registrations even where the kernel copies
#: pinned pages" (libibverbs 51+): the program asked for the marks.
USE_MADVISE = "RDMAV_USE_MADVISE"


def refusal() -> str | None:
    """Why the repair may not run here, in one line; ``None`` where it may."""
    if USE_MADVISE in os.environ:
        return (f"{USE_MADVISE} is set: the program asked libibverbs to mark its "
                "registrations MADV_DONTFORK, so the marks stay")
    copies, how = rdma_netlink_copy_on_fork()
    if copies:
        return None
    if copies is False:
        return (f"the kernel does not say it copies DMA-pinned pages at fork ({how}): "
                "there the MADV_DONTFORK marks protect registered memory, so they stay")
    return (f"the kernel's copy of DMA-pinned pages at fork cannot be confirmed ({how}): "
            "the MADV_DONTFORK marks stay")
