"""What a test compares before and after: this process's fds, children, memory."""
from __future__ import annotations

import os


def open_fds() -> set:
    """The fds this process has open."""
    return set(os.listdir("/proc/self/fd"))


def children() -> list:
    """Every child of this process, zombies included, from the kernel.

    Each thread lists the children it started; a thread that exits while
    this reads hands its children to another one, so a pass in which a
    thread vanished is read again."""
    while True:
        out = []
        try:
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/children") as f:
                    out += f.read().split()
        except FileNotFoundError:
            continue
        return out


def rss_kib() -> int:
    """Resident memory of this process."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")
