"""Whether the device's writes still reach the parent after a repaired fork.

    python repair_integrity.py MODE

Run by Debian's CPython in a venv that sees Debian's python3-pyverbs, with
RDMAV_FORK_SAFE=1 (libibverbs marks its registrations MADV_DONTFORK).  One
process on rxe0: a CQ, an RC queue pair connected to itself, a target of 256
bytes malloc()ed by a fresh thread (its page holds that thread arena's
header) registered where it lies, and a source registered by pyverbs.
MODE ``repair`` calls rdmaspawn.repair_fork() first; ``exact`` calls it
before registering a target of three pages and more with unaligned ends (in
a fresh thread's arena too), so that libibverbs' own mark, made exact by the
repair, covers its inner pages only, and the child writes the target's first
and last bytes (the pages it shares); ``control`` does not;
``unmarked`` (by hand, for kernels that do not copy) undoes the target page's
mark itself with no repair; ``hugetlb`` does the same for a target on a huge
page of its own, of the kernel's default size (vm.nr_hugepages > 0: 2 MiB on
x86-64, 32 MiB on arm64 with 16 KiB pages).  In those two the parent writes
the page before the child does.

Then os.fork(): the child writes its own bytes into its copy of the target
and of the rest of the page, tells the parent, sleeps a little and exits 0.
After the child's writes the parent writes other bytes of the page (outside
the target), the device RDMA-WRITEs the source into the target, then a SEND
of the source lands in a receive posted on the target.  Prints one JSON
line: the repair's result, whether the page was ``dc`` before the fork, the
child's exit status, and what the parent read after each device write.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verbs  # noqa: E402
from pyverbs import enums as e  # noqa: E402
from pyverbs.addr import AHAttr, GlobalRoute  # noqa: E402
from pyverbs.cq import CQ  # noqa: E402
from pyverbs.device import Context  # noqa: E402
from pyverbs.mr import MR  # noqa: E402
from pyverbs.pd import PD  # noqa: E402
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr  # noqa: E402
from pyverbs.wr import SGE, RecvWR, SendWR  # noqa: E402

import rdmaspawn  # noqa: E402

DEVICE, PORT = "rxe0", 1
MODES = ("repair", "exact", "control", "unmarked", "hugetlb")
CHILD = b"\xcc"                     # the child, everywhere it writes
PARENT = b"\x5a"                    # the parent, on the page outside the target
MADV_DOFORK = 11
MAP_HUGETLB = 0x40000
SPARE = 128                         # bytes of the page the parents' writes cover


def patterns(length: int) -> tuple[bytes, bytes, bytes]:
    """What each writer puts in a target of ``length`` bytes: the bytes before
    the fork, the source the device RDMA-WRITEs, the one it SENDs. Distinct
    from each other and from CHILD and PARENT, so any byte read tells its writer."""
    return (b"\x11" * length, bytes(i % 251 for i in range(length)),
            bytes(255 - i % 251 for i in range(length)))


def default_huge_page() -> int:
    """The size MAP_HUGETLB gets with no size flags: /proc/meminfo's
    Hugepagesize (2 MiB on x86-64, 32 MiB on arm64's 16 KiB-page kernels;
    MADV_DOFORK on less than a whole huge page is EINVAL)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Hugepagesize:"):
                return int(line.split()[1]) * 1024
    raise LookupError("no Hugepagesize in /proc/meminfo")


def read(address: int, length: int) -> bytes:
    return ctypes.string_at(address, length)


def write(address: int, data: bytes) -> None:
    ctypes.memmove(address, data, len(data))


def connect_to_itself(context: Context, pd: PD, cq: CQ) -> tuple[QP, int]:
    """An RC queue pair in RTS whose peer is itself; the GID index that worked."""
    port = context.query_port(PORT)
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    index = 0  # the GID from d0's MAC: rxe loops a packet to its own GID back
    gid = context.query_gid(PORT, index)
    attr = QPAttr(qp_state=e.IBV_QPS_INIT, cur_qp_state=e.IBV_QPS_RESET)
    attr.port_num = PORT
    attr.pkey_index = 0
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    attr.path_mtu = min(port.active_mtu, e.IBV_MTU_1024)
    attr.dest_qp_num = qp.qp_num
    attr.rq_psn = attr.sq_psn = 0
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout, attr.retry_cnt, attr.rnr_retry = 14, 7, 7
    attr.ah_attr = AHAttr(port_num=PORT, is_global=1, dlid=port.lid,
                          gr=GlobalRoute(dgid=gid, sgid_index=index, hop_limit=64))
    qp.to_rts(attr)
    return qp, index


def complete(cq: CQ, *wr_ids: int) -> list[dict[str, object]]:
    """Poll until a completion for each of ``wr_ids`` comes (30 s at most):
    each one's status, in the order of ``wr_ids``."""
    done: dict[int, dict[str, object]] = {}
    deadline = time.monotonic() + 30
    while len(done) < len(wr_ids) and time.monotonic() < deadline:
        n, wcs = cq.poll(1)
        if n:
            wc = wcs[0]
            done[wc.wr_id] = {"status": wc.status, "ok": wc.status == e.IBV_WC_SUCCESS}
        else:
            time.sleep(0.001)
    return [done.get(i, {"status": "timeout", "ok": False}) for i in wr_ids]


def repair_report(r: rdmaspawn.ForkRepair) -> dict[str, object]:
    return {"active": r.active, "reason": r.reason, "libraries": r.libraries,
            "rewritten": r.rewritten, "unmarked": r.unmarked, "small": r.small}


def main() -> int:
    mode = sys.argv[1]
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode!r}")
    length = 3 * verbs.PAGE + 200 if mode == "exact" else 256
    before, written, sent = patterns(length)
    context = Context(name=DEVICE)
    pd = PD(context)
    cq = CQ(context, 16)
    qp, gid_index = connect_to_itself(context, pd, cq)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    size = default_huge_page() if mode == "hugetlb" else verbs.PAGE
    if mode == "hugetlb":  # a huge page of its own (vm.nr_hugepages > 0)
        huge = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB)
        target = ctypes.addressof(ctypes.c_char.from_buffer(huge))
    else:
        target = verbs.thread_malloc(length)
    report: dict[str, object] = {"mode": mode, "gid_index": gid_index, "length": length}
    if mode == "exact":  # in force before the registration: its mark is made exact
        report["repair"] = repair_report(rdmaspawn.repair_fork())
    tmr = MR(pd, length, access, address=target)
    smr = MR(pd, length, e.IBV_ACCESS_LOCAL_WRITE)
    if mode == "exact":  # the registrations' marking calls the repair made exact
        report["rewritten_after"] = rdmaspawn.repair_fork().rewritten
    # The rest of the target's last page: the last SPARE bytes, in the
    # arena's top chunk (free), never in its header or the target.
    last = target + length - 1
    page = target - target % size
    spare = last - last % size + size - SPARE
    if spare < target + length + 32:
        raise SystemExit(f"no room on the page after the target at 0x{target:x}")
    write(target, before)
    report["target_page_offset"] = target - page
    report["dc_before_repair"] = verbs.dc(target)
    report["dc_inner"] = verbs.dc(target + length // 2)
    if mode == "repair":
        report["repair"] = repair_report(rdmaspawn.repair_fork())
    elif mode in ("unmarked", "hugetlb"):  # by hand, no repair: the page's mark undone
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        report["madvise"] = libc.madvise(page, size, MADV_DOFORK)
    report["dc_at_fork"] = verbs.dc(target)
    report["dc_last_at_fork"] = verbs.dc(last)
    report["dc_inner_at_fork"] = verbs.dc(target + length // 2)

    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    # By hand: the parent writes the page first, so that a page shared at
    # the fork (not copied) is the one the parent leaves, not the child.
    parent_first = mode in ("unmarked", "hugetlb")
    pid = os.fork()
    if pid == 0:  # the child: write its copy of the target and of the page
        try:
            os.close(ready_r)
            if parent_first:
                os.read(go_r, 1)
            if mode == "exact":  # the pages it shares: first and last; not the inner ones
                write(target, CHILD * 64)
                write(last - 63, CHILD * 64)
            else:
                write(target, CHILD * length)
            write(spare, CHILD * SPARE)
            os.write(ready_w, b"w")
            time.sleep(0.5)
        finally:
            os._exit(0)
    os.close(ready_w)
    if parent_first:
        write(spare, PARENT * SPARE)
        os.write(go_w, b"g")
    report["child_wrote"] = os.read(ready_r, 1) == b"w"  # b"": it died first
    os.close(ready_r)

    write(spare, PARENT * SPARE)
    smr.write(written, length)
    sge = SGE(smr.buf, length, smr.lkey)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(tmr.rkey, target)
    qp.post_send(wr)
    [report["rdma_write"]] = complete(cq, 1)
    report["after_write"] = read(target, length).hex()

    qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(target, length, tmr.lkey)]))
    smr.write(sent, length)
    qp.post_send(SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                        send_flags=e.IBV_SEND_SIGNALED))
    report["send"], report["recv"] = complete(cq, 3, 2)
    report["after_send"] = read(target, length).hex()
    report["spare"] = read(spare, SPARE).hex()

    _, status = os.waitpid(pid, 0)
    report["child"] = (f"exit {os.waitstatus_to_exitcode(status)}" if os.WIFEXITED(status)
                       else f"signal {signal.Signals(os.WTERMSIG(status)).name}")
    report["expected"] = {"after_write": written.hex(), "after_send": sent.hex(),
                          "spare": (PARENT * SPARE).hex()}
    report["kernel"] = os.uname().release
    report["rdma_system"] = subprocess.run(["rdma", "system", "show"], capture_output=True,
                                           text=True).stdout.strip()
    print(json.dumps(report), flush=True)
    del tmr, smr, qp, cq, pd, context
    return 0


if __name__ == "__main__":
    sys.exit(main())
