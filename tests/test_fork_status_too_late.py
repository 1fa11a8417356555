"""fork_status() leaves libibverbs as it found it (issue 27, item 7).

rdma-core 35-50 answer "unneeded" wherever the kernel reports copy-on-fork,
marked or not. fork_status() used to ask such a library to mark a probe page
(ibv_dontfork_range()); where its fork protection is off, that sets its
too_late flag (libibverbs/memory.c), and a later ibv_fork_init() (NCCL's,
UCX's with UCX_IB_FORK_INIT=y) returned EINVAL instead of turning protection
on. Measured in the rxe lane (44.0 on Linux 6.1):
tests/realdevice/test_rxe.py::test_fork_status_leaves_ibv_fork_init_alone.

The real library answers "unneeded" only with an RDMA driver loaded, so the
libibverbs here is a small stand-in built by the test, with the same
bookkeeping: "unneeded", a range that goes by while protection is off makes
a later ibv_fork_init() fail, and once on, ranges are marked with madvise().
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import standin_verbs

# rdma-core 33's bookkeeping, answering "unneeded" as 35-50 do on such a kernel.
VERBS = standin_verbs.RDMA_CORE_33 + r"""
int ibv_is_fork_initialized(void) { return 2; }  /* IBV_FORK_UNNEEDED */
"""

# A fresh process: the stand-in loaded first (the instance fork_status()
# finds among the loaded objects), fork_status() or not, then ibv_fork_init().
CHILD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
state = None
if sys.argv[2] == "status":
    import rdmaspawn
    st = rdmaspawn.fork_status()
    state = [st.state, st.library]
print(json.dumps({"fork_status": state, "ibv_fork_init": lib.ibv_fork_init()}))
"""


@pytest.fixture(scope="module")
def stand_in_verbs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return standin_verbs.build(tmp_path_factory, VERBS)


def _run(lib: Path, first: str) -> dict[str, object]:
    res = subprocess.run([sys.executable, "-c", CHILD, str(lib), first],
                         stdout=subprocess.PIPE, text=True, timeout=120, check=True)
    out: dict[str, object] = json.loads(res.stdout)
    return out


def test_ibv_fork_init_after_fork_status(stand_in_verbs: Path) -> None:
    """ibv_fork_init() after fork_status() returns what it returns alone (0),
    and fork_status() asked the stand-in, which marks nothing: "unneeded"."""
    alone = _run(stand_in_verbs, "alone")
    after = _run(stand_in_verbs, "status")
    assert alone["ibv_fork_init"] == 0, alone
    assert after["fork_status"] == ["unneeded", str(stand_in_verbs)], after
    assert after["ibv_fork_init"] == 0, (after, alone)
