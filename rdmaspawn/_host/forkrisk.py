"""What backs each MADV_DONTFORK mapping, and how badly a fork() child would trip on it.

The one rule, so that the doctor and ``rdmaspawn.guard()`` never disagree
(csrc/unmark.c applies it in C): device and kernel memory and a buffer on
pages of its own are risk ``"none"``; everything else is a hazard.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .._native.forkrepair import vouches
from .glibcheap import heap_header, malloc_block, thread_heap_base
from .procfs import Mapping, Pid, dontfork_in, parse_maps, read_proc

__all__ = ["RISK_ORDER", "Finding", "classify", "fork_hazards", "has_fork_hazard", "hazards_in",
           "own_hazards"]

#: "none" < "low" < "medium" < "high".
RISK_ORDER = {"none": 0, "low": 1, "medium": 2, "high": 3}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One MADV_DONTFORK mapping and what it means."""

    mapping: Mapping
    #: "heap", "arena", "stack", "malloc-block", "anon-adjacent", "anon", "shm", "file",
    #: "device", "other".
    kind: str
    #: "high", "medium", "low" or "none".
    risk: str
    #: Plain words: what backs it and why that matters.
    note: str

    def to_dict(self) -> dict[str, Any]:
        m = self.mapping
        return {
            "start": f"0x{m.start:x}",
            "end": f"0x{m.end:x}",
            "size": m.size,
            "perms": m.perms,
            "path": m.path,
            "rss_kb": m.rss_kb,
            "vmflags": sorted(m.vmflags),
            "kind": self.kind,
            "risk": self.risk,
            "note": self.note,
        }


def fork_hazards(ordered: Sequence[Mapping], pid: Pid = "self") -> list[Finding]:
    """The DONTFORK mappings among the process's ``ordered`` that a fork() child trips on."""
    found = (classify(m, ordered, pid) for m in ordered if m.dontfork)
    return [f for f in found if f.risk != "none"]


def hazards_in(smaps: bytes, pid: Pid = "self") -> list[Finding]:
    """:func:`fork_hazards` of ``/proc/PID/smaps`` text already read."""
    marked = {m.start: m for m in dontfork_in(smaps, devices=False)}
    if not marked:
        return []
    # The rest only as far as the rule looks: cheaper than every entry's fields.
    ordered = [marked.get(m.start, m) for m in parse_maps(smaps)]
    return fork_hazards(ordered, pid)


def own_hazards(smaps: bytes) -> list[Finding]:
    """:func:`hazards_in` of this process's ``smaps`` text, less the fork
    repair's own marks, which only this process can tell."""
    return [f for f in hazards_in(smaps) if not vouches(f.mapping.start, f.mapping.end)]


def has_fork_hazard(pid: Pid = "self") -> bool:
    """Whether the process holds a mark a fork() child trips on."""
    if pid == "self":
        return bool(own_hazards(read_proc(pid, "smaps")))
    return bool(hazards_in(read_proc(pid, "smaps"), pid))


def classify(m: Mapping, ordered: Sequence[Mapping], pid: Pid = "self") -> Finding:
    """The :class:`Finding` for DONTFORK mapping ``m`` among all the process ``pid``'s ``ordered``."""
    path = m.path
    if m.device:
        return Finding(m, "device", "none",
                       f"device or kernel memory ({path}), marked by its driver or the "
                       "kernel; a child that only execs never touches it")
    if path == "[heap]":
        return Finding(m, "heap", "high",
                       "the main malloc heap (brk): malloc's chunk headers and Python objects "
                       "live here; a fork() child that allocates or frees memory crashes")
    if path == "[stack]":
        return Finding(m, "stack", "high",
                       "the main thread's stack: a fork() child crashes at once")
    base = thread_heap_base(m.start, ordered) if m.anonymous else None
    header = None if base is None else heap_header(base, ordered, pid)
    if base is not None and header is not False:
        if header is None:
            # Laid out as a heap, but its header cannot be read: not called safe.
            return Finding(m, "arena", "high",
                           f"in a 64 MiB-aligned anonymous block laid out as a glibc thread "
                           f"heap (at 0x{base:x}; its header could not be read to confirm): "
                           "if it is one, glibc's fork handler and every malloc/free in the "
                           "child touch it")
        where = "its heap_info header and malloc_state" if m.start == base else "its chunks"
        return Finding(m, "arena", "high",
                       f"inside a glibc thread malloc arena (heap at 0x{base:x}, {where}): "
                       "glibc's fork handler and every malloc/free in the child touch it")
    if m.anonymous:
        return _anonymous(m, ordered, pid)
    if path.startswith("/dev/shm/"):
        return Finding(m, "shm", "low",
                       f"POSIX shared memory ({path}), e.g. a communication buffer another "
                       "process also maps: a fork() child crashes only if it touches it, and "
                       "the other processes keep their own mapping")
    if path.startswith("/"):
        return Finding(m, "file", "low",
                       f"a mapped file ({path}): a fork() child crashes only if it touches it")
    return Finding(m, "other", "low",
                   f"other memory ({path}): a fork() child crashes only if it touches it")


def _anonymous(m: Mapping, ordered: Sequence[Mapping], pid: Pid) -> Finding:
    block = malloc_block(m, pid) if m.perms.startswith("r") else False
    if block is not False:
        # Unreadable (no ptrace access to the process) is not called safe either.
        maybe = "" if block else " (its first bytes could not be read to tell)"
        return Finding(m, "malloc-block", "high",
                       f"a block glibc's malloc mapped for one allocation, whole{maybe}: its "
                       "chunk header is on the first page, and free() in a fork() child "
                       "reads it")
    # A neighbour with no access at all ("---p": a guard page, reserved
    # address space) holds nothing that a fork() child could need.
    near = [x for x in ordered
            if (x.end == m.start or x.start == m.end) and not x.perms.startswith("---")
            and (x.anonymous or x.path == "[heap]" or thread_heap_base(x.start, ordered))]
    if near:
        what = ", ".join(x.path or f"anonymous 0x{x.start:x}" for x in near)
        return Finding(m, "anon-adjacent", "medium",
                       f"anonymous memory bordering other anonymous memory ({what}): likely "
                       "split off a malloc'd block or memory next to Python's object arenas; "
                       "the rest of those pages is lost to a fork() child")
    # Nothing else lives on these pages: the safe way to hold registered memory.
    return Finding(m, "anon", "none",
                   "an anonymous mapping of its own (a page-aligned, page-padded buffer, e.g. "
                   "mmap): nothing else shares its pages, so fork() works; only a child that "
                   "touches this buffer itself would crash")
