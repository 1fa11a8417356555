"""What a test compares before and after: this process's fds, children, memory."""
from __future__ import annotations

import os


def open_fds() -> set:
    """The fds this process has open."""
    return set(os.listdir("/proc/self/fd"))


def children() -> list:
    """Every child of this process, zombies included, from the kernel."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            out += f.read().split()
    return out


def rss_kib() -> int:
    """Resident memory of this process."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")
