"""What the Open MPI + UCX tests need in the VM, or why they skip elsewhere.

The rxe lane sets RDMASPAWN_REQUIRE_RXE=1 and RDMASPAWN_REQUIRE_UCX=1: there a
missing device, mpi4py or mpirun fails the module instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from verbs import have_device


def _require(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("RDMASPAWN_REQUIRE_RXE") == "1" and \
            os.environ.get("RDMASPAWN_REQUIRE_UCX") == "1":
        pytest.fail(f"RDMASPAWN_REQUIRE_RXE=1 and RDMASPAWN_REQUIRE_UCX=1 but {why}",
                    pytrace=False)
    pytest.skip(f"{why}: runs in the soft-RoCE VM (.ci/lanes/rxe.sh)", allow_module_level=True)


def require_mpi_stack() -> None:
    """An RDMA device, mpi4py for this Python, and mpirun; else skip (or fail in the lane)."""
    _require(have_device(), "there is no RDMA device (/dev/infiniband/uverbs0)")
    try:
        import mpi4py  # noqa: F401
        have_mpi4py = True
    except ImportError:
        have_mpi4py = False
    _require(have_mpi4py and shutil.which("mpirun") is not None,
             f"mpi4py or mpirun is missing for {sys.executable}")
