"""A process that registers memory on rxe0 through pyverbs and starts children.

    python pyverbs_holder.py KIND

Run by Debian's CPython in a venv that sees Debian's python3-pyverbs
(rdma-core's own bindings, built for that interpreter and the system
libibverbs), with RDMAV_FORK_SAFE=1.  KIND:

- ``own``: a page pyverbs allocates itself (``MR(pd, length, access)``:
  posix_memalign() in the main thread, so malloc's main heap);
- ``arena``: 256 bytes malloc()ed by a fresh thread, registered where they
  lie (``MR(..., address=...)``): the page holds that thread arena's header.

Prints one JSON line (the registration, the mapping it lies in, whether each
of its pages is ``dc`` in /proc/self/smaps, pyverbs' and rdmaspawn's fork
state, each way's outcome: holder.py's ways), then ``holding``, and waits for
stdin to close, so that the doctor can inspect it.  A line ``protect`` on
stdin puts patch() and guard("raise") in force and forks under the guard;
it answers with one JSON line, the guard's choice.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import holder  # noqa: E402
import verbs  # noqa: E402
from pyverbs import enums, fork  # noqa: E402
from pyverbs.cq import CQ  # noqa: E402
from pyverbs.device import Context  # noqa: E402
from pyverbs.mr import MR  # noqa: E402
from pyverbs.pd import PD  # noqa: E402

import rdmaspawn  # noqa: E402

DEVICE = "rxe0"
LENGTH = {"own": verbs.PAGE, "arena": 256}
# The control (stock CPython, recorded) and the ways that must work.
WAYS = {name: holder.STOCK[name] for name in ("os.fork+exec", "subprocess preexec_fn")}
WAYS.update({name: holder.RDMASPAWN[name] for name in ("rdmaspawn.Popen", "patch() subprocess")})


def smaps_pages(start: int, length: int) -> dict[str, object]:
    """Read /proc/self/smaps directly (not through rdmaspawn, which is under
    test): the path of the mapping holding ``start``, and whether every page
    of [start, start+length) lies in a mapping whose VmFlags has ``dc``."""
    first = start - start % verbs.PAGE
    pages = set(range(first, start + length, verbs.PAGE))
    marked: set[int] = set()
    path, lo, hi = "", 0, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                if lo <= start < hi:
                    path = head[5] if len(head) > 5 else ""
            elif head[0] == "VmFlags:" and "dc" in head[1:]:
                marked |= {p for p in pages if lo <= p < hi}
    return {"where": path or "anonymous", "pages": len(pages), "dc": marked == pages}


def protect() -> dict[str, object]:
    """Put patch() and guard("raise") in force, as a job would, then fork
    under the guard: what it did with the fork (the doctor, asked next,
    must give the same answer from the same rule: issue 28, item 4)."""
    rdmaspawn.patch()
    rdmaspawn.guard("raise")
    try:
        pid = os.fork()
    except rdmaspawn.ForkHazardError:
        return {"guard": "refused"}
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return {"guard": f"allowed: {holder._status(os.waitstatus_to_exitcode(status))}"}


def main() -> int:
    kind = sys.argv[1]
    context = Context(name=DEVICE)
    pd = PD(context)
    # A completion queue, as every real user has: its ring is mapped from the
    # uverbs device, which the doctor must not count as a hazard.
    cq = CQ(context, 16)
    if kind == "own":
        mr = MR(pd, LENGTH[kind], enums.IBV_ACCESS_LOCAL_WRITE)
    elif kind == "arena":
        address = verbs.thread_malloc(LENGTH[kind])
        mr = MR(pd, LENGTH[kind], enums.IBV_ACCESS_LOCAL_WRITE, address=address)
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    report = {
        "kind": kind,
        "device": context.name,
        "address": f"0x{mr.buf:x}",
        "length": mr.length,
        **smaps_pages(mr.buf, mr.length),
        "pyverbs_fork": {0: "disabled", 1: "enabled", 2: "unneeded"}.get(
            fork.is_fork_initialized(), "?"),
        "fork_status": rdmaspawn.fork_status().state,
        "ways": {name: holder.outcome(way) for name, way in WAYS.items()},
    }
    print(json.dumps(report), flush=True)
    print("holding", flush=True)
    for line in sys.stdin:  # until stdin closes
        if line == "protect\n":
            print(json.dumps(protect()), flush=True)
    del mr, cq, pd, context  # kept alive (registered) until the doctor is done
    return 0


if __name__ == "__main__":
    sys.exit(main())
