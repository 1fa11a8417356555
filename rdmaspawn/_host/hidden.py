"""Processes that /proc hides from this user (``hidepid=``), counted from elsewhere.

With ``hidepid=2`` a scan of /proc alone finds one process and calls the
node clean. A live pid in a cgroup's ``cgroup.procs`` and absent from /proc
is hidden; where cgroups cannot be read, /proc/loadavg's count of threads is
set against the threads of the processes seen.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .procfs import read_proc, status_field

__all__ = ["Hidden", "find_hidden", "hidepid", "is_hidden"]

_CGROUP = "/sys/fs/cgroup"


class Hidden(NamedTuple):
    """What /proc did not show this user."""

    #: The /proc mount's hidepid option ("invisible", "noaccess", "2", ...), None if off.
    hidepid: str | None
    #: Live pids /proc does not list (from cgroups); None where cgroups cannot be read.
    pids: list[int] | None
    #: Threads the kernel counts beyond those of the processes seen
    #: (/proc/loadavg); None where not worked out (cgroups answered).
    threads: int | None

    @property
    def any(self) -> bool:
        return bool(self.pids) or bool(self.threads)


def hidepid() -> str | None:
    """The ``hidepid=`` option of the /proc this process sees, None when off or unknown."""
    try:
        text = read_proc("self", "mountinfo").decode(errors="replace")
    except OSError:
        return None
    found = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[4] != "/proc" or " - proc " not in line:
            continue
        found = None  # a later mount over /proc hides an earlier one
        for opt in line.split(" - ", 1)[1].split()[-1].split(","):
            key, _, value = opt.partition("=")
            if key == "hidepid" and value not in ("0", "off"):
                found = value
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's (EPERM): alive
    return True


def is_hidden(pid: int) -> bool:
    """Whether ``pid`` is a live process that /proc does not show this user."""
    return not os.path.exists(f"/proc/{pid}") and _alive(pid)


def _cgroup_pids() -> set[int] | None:
    pids: set[int] = set()
    read_any = False
    for top, _dirs, files in os.walk(_CGROUP):
        if "cgroup.procs" not in files:
            continue
        try:
            with open(os.path.join(top, "cgroup.procs"), "rb") as f:
                data = f.read()
        except OSError:
            continue
        read_any = True
        pids.update(int(x) for x in data.split() if x.isdigit())
    return pids if read_any else None


def _threads_of(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(status_field(pid, b"Threads") or 0)
        except (OSError, ValueError, IndexError):
            total += 1
    return total


def find_hidden(seen: list[int]) -> Hidden:
    """What /proc hid from this user, given the pids it listed (``seen``)."""
    option = hidepid()
    visible = set(seen)
    listed = _cgroup_pids()
    if listed is not None:
        pids = sorted(p for p in listed - visible if p > 0 and is_hidden(p))
        return Hidden(option, pids, None)
    if option is None:
        return Hidden(None, None, None)  # nothing hidden; a count of threads would only race
    try:
        with open("/proc/loadavg", "rb") as f:  # "0.55 0.71 0.39 2/112 15996": 112 threads
            kernel = int(f.read().split()[3].split(b"/")[1])
    except (OSError, ValueError, IndexError):
        return Hidden(option, None, None)
    return Hidden(option, None, max(0, kernel - _threads_of(seen)))
