"""The facts about the machine a run was measured on, for the report."""

from __future__ import annotations

import datetime
import mmap
import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from rdmaspawn import _native

from .model import Machine
from .numbers import GiB

THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
OVERCOMMIT_SETTING = "/proc/sys/vm/overcommit_memory"
# The rdmaspawn being measured. Not this file's parent's parent: from a checkout
# (an editable install) this code runs from benchmarks/, beside the package.
PACKAGE_DIR = Path(_native.__file__).resolve().parent.parent


def _read_system_file(path: str) -> bytes:
    """The bytes of a system-wide /proc or /sys file; empty where it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes (``{"MemTotal": ..., "MemAvailable": ...}``);
    empty where it cannot be read.  Values the kernel gives in kB are scaled."""
    out: dict[str, int] = {}
    for line in _read_system_file("/proc/meminfo").split(b"\n"):
        key, _, rest = line.partition(b":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if parts[1:] == [b"kB"] else 1
            out[key.decode("ascii", "replace")] = int(parts[0]) * scale
    return out


def cpu_model() -> str | None:
    """The processor's name from ``/proc/cpuinfo`` (its key differs by architecture), or None."""
    for line in _read_system_file("/proc/cpuinfo").split(b"\n"):
        key, _, val = line.decode("utf-8", "replace").partition(":")
        if key.strip() in ("model name", "Model", "Hardware", "cpu model") and val.strip():
            return val.strip()
    return None


def _glibc() -> str | None:
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        found = None
    if found:
        return found
    lib, ver = platform.libc_ver()
    return f"{lib} {ver}".strip() or None


def _rdmaspawn_version() -> str:
    """The installed distribution's version (the package this benchmark is part of)."""
    try:
        return version("rdmaspawn")
    except PackageNotFoundError:
        return "unknown"


def _git(*args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(PACKAGE_DIR), *args], capture_output=True,
                           text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _rdmaspawn_commit() -> str | None:
    """The checkout's commit when the measured package runs from one (an editable
    install), so that a record names the code it measured; None when installed."""
    # Tracked, not merely inside a checkout: a copy installed into a venv that
    # sits in some checkout is not that checkout's code.
    if _git("ls-files", "--error-unmatch", str(PACKAGE_DIR / "__init__.py")) is None:
        return None
    commit = _git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", str(PACKAGE_DIR))
    return f"{commit} + uncommitted changes" if dirty else commit


def describe_machine() -> Machine:
    mem = meminfo()
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    u = platform.uname()
    return Machine(
        cpu_model=cpu_model() or platform.processor() or None,
        machine=u.machine,
        cores_online=os.cpu_count(),
        cores_usable=usable,
        mem_total_gib=round(mem.get("MemTotal", 0) / GiB, 2),
        mem_available_gib=round(mem.get("MemAvailable", 0) / GiB, 2),
        kernel=f"{u.system} {u.release} {u.version}",
        glibc=_glibc(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        python_executable=sys.executable,
        rdmaspawn_version=_rdmaspawn_version(),
        transparent_hugepage=_read_system_file(THP_SETTING).decode().strip() or None,
        overcommit_memory=_read_system_file(OVERCOMMIT_SETTING).decode().strip() or None,
        page_size=mmap.PAGESIZE,
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        rdmaspawn_commit=_rdmaspawn_commit(),
    )
