"""The facts about the machine a run was measured on, for the report."""

from __future__ import annotations

import datetime
import mmap
import os
import platform
import sys

from .._procfs import cpu_model, meminfo
from .model import Machine
from .numbers import GiB

THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
OVERCOMMIT_SETTING = "/proc/sys/vm/overcommit_memory"


def _read_setting(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
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
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rdmaspawn")
    except PackageNotFoundError:
        return "unknown"


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
        transparent_hugepage=_read_setting(THP_SETTING),
        overcommit_memory=_read_setting(OVERCOMMIT_SETTING),
        page_size=mmap.PAGESIZE,
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
