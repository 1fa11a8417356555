"""Which device memory a fork() child goes without, remembered between forks.

Drivers mark some of their mappings ``VM_DONTCOPY`` themselves (see
:mod:`rdmaspawn._host.procfs`), and the guard does not count those; but
``fork()`` leaves them out of the child all the same, so in a process that
holds them the guard's count of pages left out (``csrc/forkwatch.c``) is never
zero. Each look at ``/proc/self/smaps`` records how many pages each
device-file mapping has marked; a later fork whose count of pages left out is
exactly their sum, with the same device mappings there (read from
``/proc/self/maps``, which walks no page tables), lacks nothing else.
"""

from __future__ import annotations

from .._host.procfs import device_dontfork_pages, device_headers, read_maps

__all__ = ["explains", "learn"]

# Each device-file mapping's first line -> its DONTFORK pages (0: not marked).
_pages: dict[bytes, int] = {}


def learn(smaps: bytes) -> None:
    """Remember the device mappings of this ``/proc/self/smaps`` text."""
    global _pages
    _pages = device_dontfork_pages(smaps)


def explains(left_out: int) -> bool:
    """Whether ``left_out`` pages are exactly the marked device memory remembered, still mapped."""
    if left_out <= 0 or sum(_pages.values()) != left_out:
        return False
    pages = _pages
    try:
        now = device_headers(read_maps())
    except OSError:
        return False
    return all(line in pages for line in now) and sum(pages[line] for line in now) == left_out
