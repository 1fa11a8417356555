"""What a tool asks about a process besides its mappings, from ``/proc/PID``
(through :func:`procfs.read_proc`, which names the errors)."""

from __future__ import annotations

import os

from .procfs import Pid, proc_path, read_proc, status_field

__all__ = [
    "CAP_SYS_PTRACE",
    "all_pids",
    "exe_path",
    "has_capability",
    "read_cmdline",
    "read_environ",
    "thread_count",
]

#: linux/capability.h
CAP_SYS_PTRACE = 19


def has_capability(cap: int, pid: Pid = "self") -> bool | None:
    """Whether ``cap`` is in the process's effective set (``CapEff:`` of
    ``/proc/PID/status``); None when that cannot be read."""
    try:
        value = status_field(pid, b"CapEff")
    except OSError:
        return None
    return None if value is None else bool(int(value, 16) >> cap & 1)


def all_pids() -> list[int]:
    """Every process id in /proc, in order (some may be gone by the time they are read)."""
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def read_environ(pid: Pid) -> dict[str, str]:
    """The environment the process started with (``/proc/PID/environ``; later
    setenv() calls do not show)."""
    env: dict[str, str] = {}
    for item in read_proc(pid, "environ").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:  # a nameless entry names nothing (and execve() refuses it)
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env


def read_cmdline(pid: Pid) -> list[str]:
    """The process's argv (empty for a kernel thread or a zombie)."""
    data = read_proc(pid, "cmdline")
    if not data:
        return []
    # Each argument ends with a NUL; drop only the last one, so empty arguments stay.
    return [os.fsdecode(a) for a in data[:-1].split(b"\0")] if data.endswith(b"\0") \
        else [os.fsdecode(data)]  # a process that rewrote its argv area


def exe_path(pid: Pid) -> str:
    """The file the process executes (``/proc/PID/exe``; reading it needs ptrace access)."""
    return os.readlink(proc_path(pid, "exe"))


def thread_count(pid: Pid = "self") -> int:
    """How many threads the process has now (``/proc/PID/task``)."""
    return len(os.listdir(proc_path(pid, "task")))
