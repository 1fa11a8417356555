"""Whether rdmaspawn protects a process, from its markers (``_startup.markers``)
or, for the doctor's own process, its Python state.

"protected": the fork repair, ``patch()`` or ``guard("raise")`` is in force
(``guard("warn")`` only warns); "unknown": the mappings cannot be read, never
"protected". ``patch()`` and ``guard()`` are each interpreter's own: where one
could not load the patch (a sub-interpreter), only the fork repair protects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..._host.procfs import Mapping
from ..._startup.markers import GUARD_PREFIX, MEMFD, PATCHED, REPAIRED, UNPROTECTED_PREFIX

__all__ = ["PROTECTED", "NOT_PROTECTED", "UNKNOWN", "InForce", "from_mappings"]

PROTECTED = "protected"
NOT_PROTECTED = "not protected"
UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class InForce:
    """What rdmaspawn has in force in a process; all None: not known."""

    patched: bool | None = None
    #: "raise", "warn", or None (off, or not known: see ``known``).
    guarded: str | None = None
    repaired: bool | None = None
    known: bool = False
    #: Why an interpreter of the process starts its children unpatched
    #: (markers.UNPROTECTED_PREFIX's reason), or None.
    unprotected: str | None = None

    @property
    def protection(self) -> str:
        if not self.known:
            return UNKNOWN
        return PROTECTED if self.by else NOT_PROTECTED

    @property
    def by(self) -> list[str]:
        """What protects it: ``"repair"``, ``"patch"``, ``"guard"`` (raise only)."""
        out = ["repair"] if self.repaired else []
        if self.unprotected:  # that interpreter has neither patch() nor guard()
            return out
        out += ["patch"] if self.patched else []
        return out + (["guard"] if self.guarded == "raise" else [])

    def text(self) -> str:
        if not self.known:
            return "unknown (its mappings cannot be read)"
        note = (_REASONS.get(self.unprotected, f"an interpreter is not patched ({self.unprotected})")
                if self.unprotected else
                "guard('warn'), which only warns" if self.guarded == "warn" else None)
        if not self.by:
            return "not protected" + (f" ({note})" if note else "")
        said = {"repair": "the fork repair", "patch": "patch()", "guard": "guard('raise')"}
        parts = [said[b] for b in self.by]
        if note and not self.unprotected:
            parts.append(note)
        # What still crashes where it is protected only in part.
        left = note if self.unprotected else (
            "os.fork(), os.forkpty() and multiprocessing's 'fork' still fork unchecked "
            "(patch() covers subprocess)"
            if self.patched and not self.repaired and self.guarded != "raise" else None)
        return "protected by " + ", ".join(parts) + (f"; {left}" if left else "")

    def to_dict(self) -> dict[str, object]:
        return {"protection": self.protection, "protected_by": self.by,
                "patched": self.patched, "guarded": self.guarded, "repaired": self.repaired,
                "unprotected": self.unprotected}


def from_mappings(mappings: Sequence[Mapping]) -> InForce:
    """What the markers among a process's mappings say."""
    names = {m.path[len(MEMFD):].split(" ", 1)[0] for m in mappings if m.path.startswith(MEMFD)}
    guard = sorted(n[len(GUARD_PREFIX):] for n in names if n.startswith(GUARD_PREFIX))
    unprotected = sorted(n[len(UNPROTECTED_PREFIX):] for n in names
                         if n.startswith(UNPROTECTED_PREFIX))
    return InForce(PATCHED in names, guard[0] if guard else None, REPAIRED in names,
                   known=True, unprotected=unprotected[0] if unprotected else None)


#: The reasons an interpreter gives for its marker, in words.
_REASONS = {
    "subinterpreter": "a sub-interpreter cannot load rdmaspawn's core: the children it "
                      "starts are unpatched",
    "load-failed": "an interpreter could not load the patch: the children it starts are "
                   "unpatched",
}
