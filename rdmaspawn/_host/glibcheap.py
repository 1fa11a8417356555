"""glibc's thread heaps: does an address lie in one, and is its header glibc's."""

from __future__ import annotations

import mmap
import os
import struct
import sys
from collections.abc import Sequence

from .procfs import Mapping, Pid, proc_path

__all__ = ["HEAP_MAX_SIZE", "heap_header", "malloc_block", "thread_heap_base"]


#: glibc's HEAP_MAX_SIZE (malloc/arena.c): every thread heap is an mmap() of
#: this size, aligned to it, starting with its heap_info header.
HEAP_MAX_SIZE = 2 * 4 * 1024 * 1024 * (8 if sys.maxsize > 2**32 else 4)


def thread_heap_base(addr: int, mappings: Sequence[Mapping]) -> int | None:
    """The heap_info address of the glibc thread heap holding ``addr``, else None.

    A thread heap covers its whole aligned block with anonymous memory,
    readable at its base; madvise() may have split it into several mappings
    (``mappings``, in address order). A large array that merely overlaps a
    block does not start at its base.
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


#: glibc's struct _heap_info (malloc/arena.c) starts with ar_ptr, prev, size
#: and mprotect_size: two pointers and two size_t, in native layout.
_HEAP_INFO = struct.Struct("@PPNN")


def heap_header(base: int, mappings: Sequence[Mapping], pid: Pid = "self") -> bool | None:
    """Whether a glibc ``heap_info`` really sits at ``base`` (a :func:`thread_heap_base`).

    The layout alone cannot tell a thread heap from another aligned block (a
    communication library's pool), so the header is read and held to what
    glibc writes there. None when the memory cannot be read (ptrace access).
    """
    raw = _read_memory(pid, base, _HEAP_INFO.size)
    if raw is None:
        return None
    ar_ptr, prev, size, protected = (int(v) for v in _HEAP_INFO.unpack(raw))
    page = mmap.PAGESIZE
    if not (0 < size <= protected <= HEAP_MAX_SIZE) or size % page or protected % page:
        return False
    if prev:
        # A later heap of an arena: its malloc_state lives in the first heap.
        if prev % HEAP_MAX_SIZE or prev == base or base <= ar_ptr < base + HEAP_MAX_SIZE:
            return False
    elif not base < ar_ptr < base + page:
        return False  # the first heap: malloc_state right after the header
    writable = 0
    for m in mappings:
        if m.end <= base or m.start >= base + size:
            continue
        if not m.perms.startswith("rw"):
            break
        writable = m.end - base
    return writable >= size


#: An mmapped chunk's header (malloc/malloc.c): prev_size, then the size with
#: IS_MMAPPED (2) set.
_CHUNK = struct.Struct("@NN")


def malloc_block(m: Mapping, pid: Pid = "self") -> bool | None:
    """Whether ``m`` is, whole, a block glibc's malloc mapped for one allocation
    (its chunk header, which ``free()`` reads, opens it); None when unreadable."""
    raw = _read_memory(pid, m.start, _CHUNK.size)
    if raw is None:
        return None
    prev_size, size = _CHUNK.unpack(raw)
    page = mmap.PAGESIZE
    whole = -(-(size & ~7) // page) * page  # whole pages (glibc 2.36), or not (2.43)
    return prev_size == 0 and bool(size & 2) and size & ~7 > 0 and whole == m.size


def _read_memory(pid: Pid, address: int, size: int) -> bytes | None:
    try:
        with open(proc_path(pid, "mem"), "rb", buffering=0) as f:
            raw = os.pread(f.fileno(), size, address)
    except OSError:
        return None
    return raw if len(raw) == size else None
