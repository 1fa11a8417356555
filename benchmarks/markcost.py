"""What a fork pays for a pinned page left unmarked, against a mark's mappings.

The repair leaves a registration with fewer whole pages than a threshold
unmarked (csrc/forkrepair.c), trading the copy of its pinned pages for the
mappings a mark splits off; pages are pinned as ``ibv_reg_mr()`` pins them, by
io_uring's fixed buffers, so no RDMA device is needed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from .doctable import check_page, publish, ran_on
from .workers import FORKSHAPE, Worker, take_turns

# One worker: builds its shape, then answers each line on stdin with the
# milliseconds of one fork + wait. Its first line: "ok" or why it cannot.
WORKER = FORKSHAPE + r"""
import ctypes, sys
kind, n = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.syscall.restype = ctypes.c_long
page = mmap.PAGESIZE
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
if kind in ("pinned", "marked"):
    params = (ctypes.c_uint32 * 30)()
    ring = libc.syscall(425, 8, params)  # io_uring_setup
    if ring < 0:
        print(f"no io_uring here (errno {ctypes.get_errno()})", flush=True); sys.exit(0)
    size = n * page
    buf = libc.mmap(None, size, 3, 0x22, -1, 0)
    ctypes.memset(buf, 1, size)
    iov = IoVec(buf, size)
    if libc.syscall(427, ring, 0, ctypes.byref(iov), 1) != 0:  # IORING_REGISTER_BUFFERS
        print(f"io_uring would not pin {size} bytes (errno {ctypes.get_errno()})", flush=True)
        sys.exit(0)
    if kind == "marked":
        assert libc.madvise(buf, size, 10) == 0
elif kind == "marks":
    buf = libc.mmap(None, 2 * n * page, 3, 0x22, -1, 0)
    ctypes.memset(buf, 1, 2 * n * page)
    for i in range(n):  # every other page: each mark a mapping of its own, and one between
        assert libc.madvise(buf + 2 * i * page, page, 10) == 0
print("ok", flush=True)
for _ in sys.stdin:
    print(fork_ms(), flush=True)
"""

# (label, worker kind, n, unit of the excess): n pages pinned, or n marks.
SHAPES = [
    ("plain", "plain", 0, ""),
    ("16 MiB pinned, marked", "marked", 4096, ""),
    ("16 MiB pinned, unmarked", "pinned", 4096, "page"),
    ("64 MiB pinned, unmarked", "pinned", 16384, "page"),
    ("1,000 marks", "marks", 1000, "mark"),
    ("10,000 marks", "marks", 10000, "mark"),
]


def measure(rounds: int) -> dict[str, float | str]:
    """Each shape's median fork in ms, or why its worker could not build it."""
    workers: dict[str, Worker] = {}
    found: dict[str, float | str] = {}
    for label, kind, n, _ in SHAPES:
        w = Worker(WORKER, kind, str(n))
        if w.first == "ok":
            workers[label] = w
        else:
            code = w.close()
            found[label] = w.first or f"the worker exited {code}"
    for label, times in take_turns(workers, rounds).items():
        found[label] = statistics.median(times)
    return found


def table(found: dict[str, float | str], rounds: int) -> list[str]:
    plain = found["plain"]
    lines = [ran_on("markcost", rounds) + ", turn about:", "",
             "| shape | fork | over plain | per page copied or per mark |",
             "|---|---:|---:|---:|"]
    for label, _, n, unit in SHAPES:
        ms = found[label]
        if isinstance(ms, str) or isinstance(plain, str):
            lines.append(f"| {label} | - | - | {ms if isinstance(ms, str) else ''} |")
            continue
        each = f"{(ms - plain) * 1e3 / n:.2f} us per {unit}" if unit else ""
        lines.append(f"| {label} | {ms:.2f} ms | {ms - plain:+.2f} ms | {each} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rdmaspawn.bench.markcost",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--doc", type=Path, help="write the table between PAGE's markers")
    ns = parser.parse_args(argv)
    check_page("markcost", ns.doc)
    publish("markcost", table(measure(ns.rounds), ns.rounds), ns.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
