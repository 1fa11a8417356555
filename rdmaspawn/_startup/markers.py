"""The pages a process maps while rdmaspawn protects it, for the doctor to see from outside.

``csrc/marker.c`` maps one page of a memfd named for each state while it
holds; ``/proc/PID/maps`` shows it as ``/memfd:NAME (deleted)``.  What reads
a process's mappings reads its markers, no ptrace and nothing from the
process needed (``rdmaspawn doctor --pid``/``--all``).  A fork() child keeps
its parent's (and its parent's state); exec drops both.

=========================  =========================================
marker (memfd name)        mapped while
=========================  =========================================
``rdmaspawn-patched``      ``rdmaspawn.patch()`` is in force
``rdmaspawn-guard-raise``  ``rdmaspawn.guard("raise")`` is on
``rdmaspawn-guard-warn``   ``rdmaspawn.guard("warn")`` is on
``rdmaspawn-fork-repair``  the fork repair is in force (for good)
``rdmaspawn-unprotected-`` an interpreter under ``RDMASPAWN`` could not
``REASON``                 load the patch: the children it starts are
                           not protected (in the patch's slot, in place
                           of ``rdmaspawn-patched``; REASON:
                           ``subinterpreter``, ``load-failed``)
=========================  =========================================
"""

# No `from __future__ import annotations`: under RDMASPAWN=on this module loads
# in every interpreter, and that import is a module of its own.
import os
import sys

__all__ = ["GUARD_PREFIX", "GUARD_WRAPPER", "MEMFD", "PATCHED", "REPAIRED", "UNPROTECTED_PREFIX",
           "set_guard", "set_patched", "set_unprotected"]

# Loaded by guard() in every interpreter under RDMASPAWN=on: names and two
# calls only; the doctor reads the markers (tools/doctor/inforce.py).

#: How /proc/PID/maps names a memfd mapping: "/memfd:NAME (deleted)".
MEMFD = "/memfd:"
PATCHED = "rdmaspawn-patched"
GUARD_PREFIX = "rdmaspawn-guard-"
#: csrc/forkrepair.c maps it when the repair starts.
REPAIRED = "rdmaspawn-fork-repair"
#: Followed by the reason (no space: the doctor splits the maps line there).
UNPROTECTED_PREFIX = "rdmaspawn-unprotected-"

#: Not a page: the attribute (True) on each wrapper rdmaspawn's guard puts
#: over ``os.fork`` and ``fork_exec`` (tools/guard.py). A marked fork_exec
#: wrapper hands each call on to its ``__wrapped__`` unchanged, or raises;
#: dropin/errpipe.py looks through it for rdmaspawn's own fork_exec.
GUARD_WRAPPER = "__rdmaspawn_guard__"

# Two ways to map a marker: the C core's rs_marker_set() keeps no descriptor,
# but loading the core is a large part of start-up; Python's mmap needs no
# core, but before 3.13 keeps a dup of the memfd, so there its markers move to
# the core once it is loaded. A daemon may close that dup and reuse its number:
# an mmap whose descriptor is now another file is kept, not closed, so that
# closing it never closes the program's file.
_C = "rdmaspawn._rdmaspawn_cffi"
_TRACKFD = sys.version_info >= (3, 13)
#: slot -> (name, the mmap holding its page, (its descriptor, (st_dev, st_ino)) before 3.13)
_held: "dict[str, tuple[str, object, tuple[int, tuple[int, int]] | None]]" = {}
#: The mmaps whose descriptor the program took over: not closed here (see above).
_kept: "list[object]" = []


def _set(slot_name: str, name: "str | None") -> None:
    # Best effort: a state without its marker is reported as not protected,
    # never the other way round (csrc/marker.c).
    if _TRACKFD or _C not in sys.modules:
        _set_mapped(slot_name, name)
        return
    for slot, (held, _, _) in list(_held.items()):  # to the core: no descriptor kept
        if slot != slot_name:
            _set_in_core(slot, held)
        _set_mapped(slot, None)
    _set_in_core(slot_name, name)


def _set_in_core(slot_name: str, name: "str | None") -> None:
    from .._rdmaspawn_cffi import ffi, lib

    lib.rs_marker_set(getattr(lib, slot_name), ffi.NULL if name is None else name.encode())


def _set_mapped(slot_name: str, name: "str | None") -> None:
    import mmap

    fresh = None
    kept_fd = None
    if name is not None:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, mmap.PAGESIZE)
            if _TRACKFD:
                fresh = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ,
                                  trackfd=False)  # type: ignore[call-arg,unused-ignore]
            else:
                # mmap dup()s fd to the lowest free number: this one, unless
                # another thread takes it in between (then _dup_of looks).
                probe = os.dup(fd)
                os.close(probe)
                fresh = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)
                kept_fd = _dup_of(fd, probe)
        finally:
            os.close(fd)
    old = _held.pop(slot_name, None)  # dict operations: atomic under the GIL
    if fresh is not None and name is not None:
        _held[slot_name] = (name, fresh, kept_fd)
    if old is not None:
        if _still_ours(old[2]):
            old[1].close()  # type: ignore[attr-defined]
        else:
            _kept.append(old[1])


def _identity(fd: int) -> "tuple[int, int]":
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _dup_of(fd: int, likely: int) -> "tuple[int, tuple[int, int]] | None":
    """The descriptor mmap dup()ed from ``fd`` (the only other one of its
    memfd, made a moment ago), with the file's identity; None if not found."""
    me = _identity(fd)
    try:
        if likely != fd and _identity(likely) == me:
            return likely, me
    except OSError:
        pass
    try:
        entries = os.listdir("/proc/self/fd")
    except OSError:
        return None  # no /proc (a chroot): kept, never closed
    for entry in entries:
        other = int(entry)
        if other == fd:
            continue
        try:
            if _identity(other) == me:
                return other, me
        except OSError:
            continue  # listdir's own descriptor, closed by now
    return None


def _still_ours(kept_fd: "tuple[int, tuple[int, int]] | None") -> bool:
    """Whether closing the mmap closes only what it holds: 3.13+'s keeps no
    descriptor; an older one's must still be the marker's memfd."""
    if _TRACKFD:
        return True
    if kept_fd is None:
        return False  # never found: closing might close anything
    fd, identity = kept_fd
    try:
        return _identity(fd) == identity
    except OSError:
        return False  # closed by the program: the mmap would close a free number, or a new one


def set_patched(on: bool) -> None:
    """Map (or unmap) the marker that says patch() is in force."""
    _set("RS_MARKER_PATCH", PATCHED if on else None)


def set_guard(action: "str | None") -> None:
    """Map the marker for guard(action), in place of the one before; None: unmap it."""
    _set("RS_MARKER_GUARD", None if action is None else GUARD_PREFIX + action)


def set_unprotected(reason: str) -> None:
    """Map the marker that says this interpreter could not load the patch
    (``reason``, one word), in place of the one that said it was in force."""
    _set("RS_MARKER_PATCH", UNPROTECTED_PREFIX + reason)
