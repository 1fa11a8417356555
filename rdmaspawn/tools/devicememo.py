"""Which marked memory a fork() child goes without, known harmless, remembered between forks.

A held child's count of pages left out includes what drivers mark ``VM_DONTCOPY``
themselves and the fork repair's exact marks, which the guard does not count.
Each look at smaps records their pages; a later fork that lacks exactly their
sum, with the same device mappings in ``/proc/self/maps`` (which walks no page
tables), lacks nothing else.
"""

from __future__ import annotations

import mmap

from .._host.procfs import device_dontfork_pages, device_headers, dontfork_in, read_proc
from .._native.forkrepair import vouches

__all__ = ["explains", "learn"]

# Each device-file mapping's first line -> its DONTFORK pages (0: not marked);
# each of the repair's marks, as "lo-hi " (how its maps line starts) -> its pages.
_pages: dict[bytes, int] = {}


def learn(smaps: bytes) -> None:
    """Remember the device mappings and the repair's marks of this ``/proc/self/smaps`` text."""
    global _pages
    pages = device_dontfork_pages(smaps)
    for m in dontfork_in(smaps, devices=False):
        if vouches(m.start, m.end):
            pages[b"%x-%x " % (m.start, m.end)] = m.size // mmap.PAGESIZE
    _pages = pages


def explains(left_out: int) -> bool:
    """Whether ``left_out`` pages are exactly the marked device memory remembered, still mapped."""
    if left_out <= 0 or sum(_pages.values()) != left_out:
        return False
    pages = _pages
    try:
        maps = read_proc("self", "maps")
    except OSError:
        return False
    now = device_headers(maps)
    ranges = [key for key in pages if key.endswith(b" ")
              and (maps.startswith(key) or b"\n" + key in maps)]
    return (all(line in pages for line in now)
            and sum(pages[line] for line in now + ranges) == left_out)
