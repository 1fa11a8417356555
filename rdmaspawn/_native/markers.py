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
=========================  =========================================
"""

from __future__ import annotations

__all__ = ["GUARD_PREFIX", "MEMFD", "PATCHED", "REPAIRED", "set_guard", "set_patched"]

# Loaded by guard() in every interpreter under RDMASPAWN=on: names and two
# calls only; the doctor reads the markers (tools/doctor/inforce.py).

#: How /proc/PID/maps names a memfd mapping: "/memfd:NAME (deleted)".
MEMFD = "/memfd:"
PATCHED = "rdmaspawn-patched"
GUARD_PREFIX = "rdmaspawn-guard-"
#: csrc/forkrepair.c maps it when the repair starts.
REPAIRED = "rdmaspawn-fork-repair"


def _set(slot_name: str, name: str | None) -> None:
    from .._rdmaspawn_cffi import ffi, lib

    # Best effort: a state without its marker is reported as not protected,
    # never the other way round (csrc/marker.c).
    lib.rs_marker_set(getattr(lib, slot_name), ffi.NULL if name is None else name.encode())


def set_patched(on: bool) -> None:
    """Map (or unmap) the marker that says patch() is in force."""
    _set("RS_MARKER_PATCH", PATCHED if on else None)


def set_guard(action: str | None) -> None:
    """Map the marker for guard(action), in place of the one before; None: unmap it."""
    _set("RS_MARKER_GUARD", None if action is None else GUARD_PREFIX + action)
