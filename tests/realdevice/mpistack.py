"""What the Open MPI + UCX tests need in the VM, or why they skip elsewhere.

The rxe lane sets RDMASPAWN_REQUIRE_RXE=1 and RDMASPAWN_REQUIRE_UCX=1: there a
missing device, mpi4py or mpirun fails the module instead of skipping it.
"""

from __future__ import annotations

import shutil
import sys

from needs import require
from verbs import have_device

_VARIABLES = ("RDMASPAWN_REQUIRE_RXE", "RDMASPAWN_REQUIRE_UCX")


def require_mpi_stack() -> None:
    """An RDMA device, mpi4py for this Python, and mpirun; else skip (or fail in the lane)."""
    require(have_device(), "there is no RDMA device (/dev/infiniband/uverbs0)", *_VARIABLES)
    try:
        import mpi4py  # noqa: F401
        have_mpi4py = True
    except ImportError:
        have_mpi4py = False
    require(have_mpi4py and shutil.which("mpirun") is not None,
            f"mpi4py or mpirun is missing for {sys.executable}", *_VARIABLES)
