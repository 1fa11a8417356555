"""glibc's thread heaps: does an address lie in one (the doctor's classifier
and the hazard planter ask; :mod:`procfs` gives the mappings)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .procfs import Mapping

__all__ = ["HEAP_MAX_SIZE", "thread_heap_base"]


#: glibc's HEAP_MAX_SIZE (malloc/arena.c: 2 * DEFAULT_MMAP_THRESHOLD_MAX, i.e.
#: 2 * 4 * 1024 * 1024 * sizeof(long)): 64 MiB on 64-bit, 1 MiB on 32-bit.
#: Every thread arena's heap is an mmap() of exactly this size at an address
#: aligned to it, starting with its heap_info header.
HEAP_MAX_SIZE = 2 * 4 * 1024 * 1024 * (8 if sys.maxsize > 2**32 else 4)


def thread_heap_base(addr: int, mappings: Sequence[Mapping]) -> int | None:
    """The heap_info address of the glibc thread heap holding ``addr``, else None.

    ``mappings`` are the process's, in address order (:func:`all_mappings` or
    :func:`parse_maps`).  A thread heap is anonymous memory that starts at a
    HEAP_MAX_SIZE-aligned address with readable pages (read-write first,
    PROT_NONE after) and covers the whole aligned block; madvise() may have
    split it into several mappings, so the block must be covered with no gap
    and nothing but anonymous memory.  A mapping that merely overlaps an
    aligned block (a large array) does not start at its base and is refused.
    """
    base = addr - (addr % HEAP_MAX_SIZE)
    end = base + HEAP_MAX_SIZE
    pos = base
    for m in mappings:
        if m.end <= base or m.start >= end:
            continue
        if m.start != pos or not m.anonymous or (pos == base and not m.perms.startswith("r")):
            return None
        pos = m.end
    return base if pos >= end else None
