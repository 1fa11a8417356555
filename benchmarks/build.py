"""Build the benchmark's C programs, the child noop.c and the floor floor.c, with the
system compiler at run time; without one the child is /bin/true, there is no floor, and
the report says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SOURCES = Path(__file__).resolve().parent  # noop.c and floor.c ship beside this file
FALLBACK_CHILD = "/bin/true"
COMPILE_TIMEOUT_S = 120
RUN_TIMEOUT_S = 60

# How to build the no-op child, best first.
NOOP_ATTEMPTS = (
    ("static, -nostdlib, raw exit_group", ["-static", "-O2", "-nostdlib", "-DNOOP_NOSTDLIB"]),
    ("static, libc", ["-static", "-O2"]),
)


@dataclass
class Built:
    child: str  # the executable every spawner starts
    child_kind: str  # how it was built, for the report
    floor: str | None  # the floor program, or None
    floor_reason: str  # why there is no floor, or how it was built
    cc: str | None
    notes: list[str] = field(default_factory=list)


def _run(args: list[str], timeout: float) -> tuple[bool, str]:
    """(succeeded, what it said: its stderr, else its stdout)."""
    try:
        r = subprocess.run(args, capture_output=True, text=True, errors="replace",
                           timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


def _compile(args: list[str]) -> tuple[bool, str]:
    """(succeeded, the compiler's last words)."""
    ok, said = _run(args, COMPILE_TIMEOUT_S)
    return ok, said.splitlines()[-1] if said else ""


def build(workdir: Path) -> Built:
    """Compile noop.c and floor.c into workdir."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return Built(FALLBACK_CHILD, "/bin/true (fallback)", None, "no C compiler (cc) found",
                     None, ["no C compiler: the child is /bin/true and there is no floor"])

    notes: list[str] = []
    child, child_kind = FALLBACK_CHILD, "/bin/true (fallback)"
    noop = workdir / "noop"
    errors = []
    for kind, flags in NOOP_ATTEMPTS:
        ok, err = _compile([cc, *flags, "-o", str(noop), str(SOURCES / "noop.c")])
        if ok and _run([str(noop)], RUN_TIMEOUT_S)[0]:
            child, child_kind = str(noop), kind
            break
        errors.append(f"{kind}: {err or 'does not run'}")
    else:
        notes.append("could not build the no-op child, using /bin/true: " + "; ".join(errors))

    floor_bin = workdir / "floor"
    ok, err = _compile([cc, "-O2", "-pthread", "-o", str(floor_bin), str(SOURCES / "floor.c")])
    if not ok:
        return Built(child, child_kind, None, f"cc failed on floor.c: {err or '?'}", cc, notes)
    ok, out = _run([str(floor_bin), "1", "1", child], RUN_TIMEOUT_S)
    if not ok:
        return Built(child, child_kind, None, f"floor does not run: {out}", cc, notes)
    return Built(child, child_kind, str(floor_bin), "built with " + cc, cc, notes)
