"""Whether the fork repair may run in this process: the one rule, without the repair.

Start-up asks it in every interpreter, and on most hosts the answer is no,
so the repair loads only where it is yes. Without ``/sys/class/infiniband``
(ib_core's class) no memory can be registered: no without asking, so no
socket and no ib_core loaded to serve one. A driver loaded later leaves the
repair off (a later ``rdmaspawn.repair_fork()`` asks again).
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.
import os

__all__ = ["USE_MADVISE", "refusal"]

#: rdma-core's variable for "mark registrations even where the kernel copies
#: pinned pages" (libibverbs 51+): the program asked for the marks.
USE_MADVISE = "RDMAV_USE_MADVISE"
#: The device class ib_core registers: there while it is loaded.
IB_CLASS = "/sys/class/infiniband"


def refusal() -> "str | None":
    """Why the repair may not run here, in one line; ``None`` where it may."""
    if USE_MADVISE in os.environ:
        return (f"{USE_MADVISE} is set: the program asked libibverbs to mark its "
                "registrations MADV_DONTFORK, so the marks stay")
    if not os.path.isdir(IB_CLASS):
        # What rdma_netlink_copy_on_fork() says there, without its socket.
        copies, how = None, "RDMA netlink is unavailable: ib_core is not loaded"
    else:
        from .._host.rdmanetlink import rdma_netlink_copy_on_fork

        copies, how = rdma_netlink_copy_on_fork()
    if copies:
        return None
    if copies is False:
        return (f"the kernel does not say it copies DMA-pinned pages at fork ({how}): "
                "there the MADV_DONTFORK marks protect registered memory, so they stay")
    return (f"the kernel's copy of DMA-pinned pages at fork cannot be confirmed ({how}): "
            "the MADV_DONTFORK marks stay")
