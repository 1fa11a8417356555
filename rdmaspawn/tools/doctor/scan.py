"""``rdmaspawn doctor --all``: every process on the node that the caller may read.

Processes that exit during the scan, that may not be read, or that /proc hides
(``hidepid=``, :mod:`rdmaspawn._host.hidden`) are counted, not fatal: whether
rdmaspawn protects those is unknown, and the scan says so. Each JSON line
carries the host name, so that srun/pdsh over a cluster collects one report.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Iterable
from typing import Any

from ..._host.forkrisk import Finding, classify
from ..._host.hidden import Hidden, find_hidden
from ..._host.processinfo import all_pids, read_cmdline
from ..._host.procfs import NoSuchProcessError, all_mappings, has_dontfork, read_proc
from .escape import printable
from .facts import ucx_fork_settings
from .inforce import InForce, from_mappings
from .process import environ_of, mapped_libraries

__all__ = ["NodeScan", "ProcessEntry", "scan_node"]

_COMMAND_WIDTH = 80


@dataclasses.dataclass(frozen=True)
class ProcessEntry:
    """A process that holds MADV_DONTFORK memory."""

    pid: int
    command: str
    findings: list[Finding]
    libraries: dict[str, str]
    #: What rdmaspawn has in force there (its markers).
    in_force: InForce = InForce()
    #: UCX's fork settings there (:func:`.facts.ucx_fork_settings`).
    ucx: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def hazardous(self) -> bool:
        """Marked memory a fork() child trips on (whether or not rdmaspawn protects it)."""
        return any(f.risk != "none" for f in self.findings)

    @property
    def verdict(self) -> str:
        """``"HAZARD"``, ``"PROTECTED"`` (hazardous, rdmaspawn in force) or ``"ok"``."""
        if not self.hazardous:
            return "ok"
        return "PROTECTED" if self.in_force.by else "HAZARD"

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

    def to_dict(self, host: str) -> dict[str, Any]:
        return {
            "type": "process", "host": host, "pid": self.pid, "command": self.command,
            "verdict": self.verdict, "hazardous": self.hazardous,
            "overlaps": [f.to_dict() for f in self.findings],
            "rdmaspawn": {"engine": self.engine, **self.in_force.to_dict()},
            "libraries": self.libraries, "ucx": self.ucx,
        }

    def to_text(self) -> str:
        # One line, even for `python -c` code; the owner's control codes escaped.
        command = printable(" ".join(self.command.split()))
        if len(command) > _COMMAND_WIDTH:
            command = command[:_COMMAND_WIDTH - 3] + "..."
        loaded = "rdmaspawn not loaded" if self.engine is None else "rdmaspawn engine loaded"
        text = (f"pid {self.pid:<7} {self.verdict:<9} {command}\n"
                f"             DONTFORK over: {self.overlaps()}; {loaded}, {self.in_force.text()}")
        if self.ucx.get("loaded"):
            text += f"\n             UCX: {printable(self.ucx['note'])}"
        return text


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
    #: What /proc did not list at all (``hidepid=``); None when not asked (a given pid list).
    hidden: Hidden | None = None

    @property
    def hazardous(self) -> list[ProcessEntry]:
        """The entries whose verdict is HAZARD (rdmaspawn not in force there)."""
        return [e for e in self.entries if e.verdict == "HAZARD"]

    @property
    def protected(self) -> list[ProcessEntry]:
        return [e for e in self.entries if e.verdict == "PROTECTED"]

    @property
    def complete(self) -> bool:
        """Whether every live process on the node was read."""
        h = self.hidden
        if self.denied:
            return False
        if h is None or (h.hidepid is None and not h.pids):
            return True
        # Something hides processes: complete only where a count says none is hidden.
        return not h.any and (h.pids is not None or h.threads is not None)

    @property
    def exit_code(self) -> int:
        return 1 if self.hazardous else 0

    def summary(self) -> dict[str, Any]:
        h = self.hidden
        return {
            "type": "summary", "host": self.host, "scanned": self.scanned,
            "dontfork": len(self.entries), "hazardous": len(self.hazardous),
            "protected": len(self.protected),
            "vanished": len(self.vanished), "denied": len(self.denied),
            "denied_pids": self.denied,
            "hidepid": h.hidepid if h else None,
            "hidden": None if h is None or h.pids is None else len(h.pids),
            "hidden_pids": h.pids if h else None,
            "hidden_threads": h.threads if h else None,
            # Processes whose memory, and whether rdmaspawn protects them, are unknown.
            "unknown": len(self.denied) + (len(h.pids) if h and h.pids else 0),
            "complete": self.complete,
        }

    def to_json_lines(self) -> str:
        lines = [json.dumps(e.to_dict(self.host)) for e in self.entries]
        return "\n".join(lines + [json.dumps(self.summary())]) + "\n"

    def to_text(self) -> str:
        out = [f"rdmaspawn doctor --all on {self.host}:"]
        which = "no process" if self.complete else "no process read"
        out += [e.to_text() for e in self.entries] or [f"{which} holds MADV_DONTFORK memory"]
        out.append(f"{self.scanned} processes read: {len(self.entries)} hold MADV_DONTFORK memory, "
                   f"{len(self.hazardous)} hazardous, {len(self.protected)} protected by "
                   f"rdmaspawn; {len(self.vanished)} exited during the scan; "
                   f"{len(self.denied)} not readable by this user")
        h = self.hidden or Hidden(None, [], None)
        pids = h.pids or []
        if h.hidepid is not None and h.pids != []:
            shown = ", ".join(map(str, pids[:10])) + (", ..." if len(pids) > 10 else "")
            what = (f"{len(pids)} processes ({shown})" if pids
                    else f"about {h.threads} threads of other processes" if h.threads
                    else "other users' processes, how many cannot be told")
            out.append(f"hidden: /proc is mounted with hidepid={h.hidepid}, so {what} "
                       "could not be seen at all")
        elif pids:
            out.append(f"hidden: {len(pids)} live processes that /proc does not list")
        if not self.complete:
            out.append("Verdict covers only the processes read: whether the others hold "
                       "MADV_DONTFORK memory, and whether rdmaspawn protects them, is unknown")
        if (self.denied or not self.complete) and os.geteuid() != 0:
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
    listed = all_pids() if pids is None else list(pids)
    for pid in listed:
        try:
            if has_dontfork(pid, devices=True):
                mappings = all_mappings(pid)
                findings = [classify(m, mappings, pid) for m in mappings if m.dontfork]
                if findings:  # it may have dropped them in between
                    libraries = mapped_libraries(pid)
                    env, _, known = environ_of(pid, False)
                    entries.append(ProcessEntry(pid, _command(pid), findings, libraries,
                                                from_mappings(mappings),
                                                ucx_fork_settings(env, libraries, known)))
        except NoSuchProcessError:
            vanished.append(pid)
        except PermissionError:
            denied.append(pid)
        else:
            scanned += 1
    hidden = find_hidden(listed) if pids is None else None
    return NodeScan(socket.gethostname(), entries, scanned, vanished, denied, hidden)
