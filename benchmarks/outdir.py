"""Where a run writes: an explicit --out, else a new ``rdmaspawn-bench-YYYYMMDD-HHMMSS``
in the current directory, or under $TMPDIR where that is ``/`` or not writable.
Never into ``/`` itself, even when asked: a benchmark's files there are always a mistake.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path

DEFAULT_PREFIX = "rdmaspawn-bench-"
ROOT = Path("/")
MAX_SAME_SECOND = 100  # runs started in one second that get their own folder


class OutDirError(ValueError):
    """The output folder cannot be used; the message says why."""


def default_out_dir(cwd: Path | None, tmpdir: Path, now: datetime.datetime) -> Path:
    """The folder a run without --out writes to (not yet created)."""
    try:
        writable = cwd is not None and cwd.resolve() != ROOT and cwd.is_dir() and os.access(
            cwd, os.W_OK | os.X_OK)
    except OSError:
        writable = False
    return (cwd if writable and cwd else tmpdir) / f"{DEFAULT_PREFIX}{now:%Y%m%d-%H%M%S}"


def make_out_dir(explicit: Path | None) -> Path:
    """Create and return the output folder (see the module docstring)."""
    if explicit is not None:
        if explicit.resolve() == ROOT:
            raise OutDirError("refusing to write the benchmark's files into /: "
                              "give --out a folder of their own")
        try:
            explicit.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutDirError(f"cannot create --out {explicit}: {e.strerror}") from None
        return explicit
    try:
        cwd: Path | None = Path.cwd()
    except OSError:  # the current directory was removed
        cwd = None
    first = default_out_dir(cwd, Path(tempfile.gettempdir()), datetime.datetime.now())
    # A folder of its own: a second run in the same second gets "-2".
    for k in range(1, MAX_SAME_SECOND + 1):
        path = first if k == 1 else first.with_name(f"{first.name}-{k}")
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as e:
            raise OutDirError(f"cannot create {path}: {e.strerror}") from None
        return path
    raise OutDirError(f"{first} and {MAX_SAME_SECOND - 1} numbered folders beside it exist")
