"""``rdmaspawn doctor --all``: every process on the node that the caller may read.

One entry for each process that holds MADV_DONTFORK memory: its command,
what the marked memory overlaps (the doctor's classification), and whether
rdmaspawn is in force there.  From outside a process one can see whether
rdmaspawn's engine module (``_rdmaspawn_cffi*.so``) is mapped, i.e. whether
the process imported rdmaspawn's engine; whether ``rdmaspawn.patch()`` is in
force lives in the process's Python objects and cannot be read from /proc,
so it is reported only for the doctor's own process.

Processes that exit during the scan, or that the caller may not read, are
counted, not fatal.  The JSON form is one object per line, each with the
host name, so that srun/pdsh over a cluster collects one report.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Iterable
from typing import Any

from ..._host.forkrisk import Finding, classify
from ..._host.processinfo import all_pids, read_cmdline
from ..._host.procfs import NoSuchProcessError, all_mappings, has_dontfork, read_proc
from .escape import printable
from .process import mapped_libraries

__all__ = ["NodeScan", "ProcessEntry", "scan_node"]

_COMMAND_WIDTH = 80


@dataclasses.dataclass(frozen=True)
class ProcessEntry:
    """A process that holds MADV_DONTFORK memory."""

    pid: int
    command: str
    findings: list[Finding]
    libraries: dict[str, str]
    #: rdmaspawn.patch() state: known for the doctor's own process only.
    patched: bool | None = None

    @property
    def hazardous(self) -> bool:
        return any(f.risk != "none" for f in self.findings)

    @property
    def engine(self) -> str | None:
        """Path of rdmaspawn's engine module when the process maps it."""
        return self.libraries.get("rdmaspawn engine")

    def overlaps(self) -> str:
        """``"arena (high), device (none)"``: each kind once, worst first."""
        seen: dict[str, str] = {}
        for f in sorted(self.findings, key=lambda f: f.risk != "high"):
            seen.setdefault(f.kind, f.risk)
        return ", ".join(f"{kind} ({risk})" for kind, risk in seen.items())

    def rdmaspawn_state(self) -> str:
        if self.engine is None:
            return "rdmaspawn not loaded"
        if self.patched is None:
            return "rdmaspawn engine loaded (patch() state not visible from outside)"
        return "rdmaspawn engine loaded, patch() " + ("in force" if self.patched else "not in force")

    def to_dict(self, host: str) -> dict[str, Any]:
        return {
            "type": "process", "host": host, "pid": self.pid, "command": self.command,
            "hazardous": self.hazardous, "overlaps": [f.to_dict() for f in self.findings],
            "rdmaspawn": {"engine": self.engine, "patched": self.patched},
            "libraries": self.libraries,
        }

    def to_text(self) -> str:
        verdict = "HAZARD" if self.hazardous else "ok"
        # One line, even for `python -c` code; the owner's control codes escaped.
        command = printable(" ".join(self.command.split()))
        if len(command) > _COMMAND_WIDTH:
            command = command[:_COMMAND_WIDTH - 3] + "..."
        return (f"pid {self.pid:<7} {verdict:<6} {command}\n"
                f"             DONTFORK over: {self.overlaps()}; {self.rdmaspawn_state()}")


@dataclasses.dataclass
class NodeScan:
    """What :func:`scan_node` found."""

    host: str
    entries: list[ProcessEntry]
    #: Processes read to the end (with or without DONTFORK memory).
    scanned: int
    #: Pids that exited between being listed and being read.
    vanished: list[int]
    #: Pids the caller may not read (another user's, not dumpable, no CAP_SYS_PTRACE).
    denied: list[int]

    @property
    def hazardous(self) -> list[ProcessEntry]:
        return [e for e in self.entries if e.hazardous]

    @property
    def exit_code(self) -> int:
        return 1 if self.hazardous else 0

    def summary(self) -> dict[str, Any]:
        return {
            "type": "summary", "host": self.host, "scanned": self.scanned,
            "dontfork": len(self.entries), "hazardous": len(self.hazardous),
            "vanished": len(self.vanished), "denied": len(self.denied),
            "denied_pids": self.denied,
        }

    def to_json_lines(self) -> str:
        lines = [json.dumps(e.to_dict(self.host)) for e in self.entries]
        return "\n".join(lines + [json.dumps(self.summary())]) + "\n"

    def to_text(self) -> str:
        out = [f"rdmaspawn doctor --all on {self.host}:"]
        out += [e.to_text() for e in self.entries] or ["no process holds MADV_DONTFORK memory"]
        s = (f"{self.scanned} processes read: {len(self.entries)} hold MADV_DONTFORK memory, "
             f"{len(self.hazardous)} hazardous; {len(self.vanished)} exited during the scan; "
             f"{len(self.denied)} not readable by this user")
        out.append(s)
        if self.denied and os.geteuid() != 0:
            out.append("(run as root to read every process)")
        return "\n".join(out) + "\n"


def _command(pid: int) -> str:
    """The command line, or ``[comm]`` for a process without one (a kernel thread)."""
    try:
        argv = read_cmdline(pid)
        if argv:
            return " ".join(argv)
        return "[" + os.fsdecode(read_proc(pid, "comm").strip()) + "]"
    except OSError:
        return "?"


def scan_node(pids: Iterable[int] | None = None) -> NodeScan:
    """Scan ``pids`` (default: every process in /proc) for MADV_DONTFORK memory."""
    entries: list[ProcessEntry] = []
    vanished: list[int] = []
    denied: list[int] = []
    scanned = 0
    me = os.getpid()
    for pid in all_pids() if pids is None else pids:
        try:
            if has_dontfork(pid, devices=True):
                mappings = all_mappings(pid)
                findings = [classify(m, mappings, pid) for m in mappings if m.dontfork]
                if findings:  # it may have dropped them in between
                    entries.append(_entry(pid, findings, me))
        except NoSuchProcessError:
            vanished.append(pid)
            continue
        except PermissionError:
            denied.append(pid)
            continue
        scanned += 1
    return NodeScan(socket.gethostname(), entries, scanned, vanished, denied)


def _entry(pid: int, findings: list[Finding], me: int) -> ProcessEntry:
    patched = None
    if pid == me:
        from rdmaspawn.dropin.patch import is_patched

        patched = bool(is_patched())
    return ProcessEntry(pid, _command(pid), findings, mapped_libraries(pid), patched)
