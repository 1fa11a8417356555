"""What the system libibverbs marks on this kernel, printed for a lane's record.

    python fork_marks.py

Not a test: the arm64 lane's soft-RoCE boot prints it before its pytest run,
so that its console says why plant("verbs") cannot plant there while real
registrations are marked.  Each case runs in a fresh process, because an
ibv_dontfork_range() before ibv_fork_init() sets libibverbs' "too late" flag
and makes the later ibv_fork_init() fail (EINVAL):

- ``rdma system show``: whether RDMA netlink reports copy-on-fork;
- ``noinit``: ibv_dontfork_range() on a page with fork support never
  initialised, the page's smaps ``dc`` flag after it;
- ``init``: ibv_fork_init() (what RDMAV_FORK_SAFE=1 and NCCL do), then the
  same; ibv_reg_mr() marks through the same call.

Each line: the case, ibv_is_fork_initialized() (0 disabled, 1 enabled,
2 unneeded) before and after, the return codes, and ``dc`` true or false.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verbs import dc  # noqa: E402

STATES = {0: "disabled", 1: "enabled", 2: "unneeded"}


def case(init: bool) -> dict[str, object]:
    verbs = ctypes.CDLL("libibverbs.so.1", use_errno=True)
    verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, page)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    out: dict[str, object] = {"case": "init" if init else "noinit", "page": page,
                              "before": STATES.get(verbs.ibv_is_fork_initialized())}
    if init:
        out["ibv_fork_init"] = verbs.ibv_fork_init()
    out["after"] = STATES.get(verbs.ibv_is_fork_initialized())
    out["ibv_dontfork_range"] = verbs.ibv_dontfork_range(address, page)
    out["dc"] = dc(address)
    return out


def main() -> int:
    if sys.argv[1:] in (["init"], ["noinit"]):
        print(json.dumps(case(sys.argv[1] == "init")))
        return 0
    print(f"kernel {os.uname().release}, page {mmap.PAGESIZE}, RDMAV_FORK_SAFE="
          f"{os.environ.get('RDMAV_FORK_SAFE')}, RDMAV_USE_MADVISE="
          f"{os.environ.get('RDMAV_USE_MADVISE')}")
    show = subprocess.run(["rdma", "system", "show"], capture_output=True, text=True)
    print(f"rdma system show: {show.stdout.strip() or show.stderr.strip()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMAV_")}
    for name in ("noinit", "init"):
        proc = subprocess.run([sys.executable, __file__, name], env=env,
                              capture_output=True, text=True)
        print(proc.stdout.strip() or f"{name}: exit {proc.returncode} {proc.stderr.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
