"""What the doctor found about one process, as text or JSON."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..._host.forkrisk import Finding
from .escape import printable
from .facts import ENV_VARS
from .inforce import InForce
from .protection import Protection

__all__ = ["Report"]


@dataclasses.dataclass
class Report:
    """What :func:`~rdmaspawn.tools.doctor.doctor` found.  ``verdict`` is ``"OK"`` or ``"HAZARD"``."""

    pid: int
    is_self: bool
    verdict: str
    problems: list[str]
    advice: list[str]
    findings: list[Finding]
    map_count: int
    max_map_count: int | None
    libraries: dict[str, str]
    verbs_loaded: bool
    #: The libibverbs the process maps, else the one the system would load.
    verbs_library: str | None
    rdma_core: int | None
    fork_status: str | None
    fork_status_note: str
    #: What applies on this machine (see :mod:`.protection`).
    fork_protection: Protection
    environment: dict[str, str | None]
    environment_source: str
    kernel: str
    kernel_copies_pinned_pages: bool | None
    rdma_netlink: str
    python: str
    subprocess_default: str
    subprocess_preexec: str
    #: The fork repair: "repaired" (in force), "repairable", or "not repairable ...".
    fork_repair: str
    fork_repair_note: str
    #: Whether rdmaspawn's engine module is mapped in the process.
    engine_loaded: bool
    patched: bool | None
    guarded: str | None
    mp_start_method: str | None
    mp_default_start_method: str | None
    #: How the process's engine starts children: "clone3" or "clone" (the
    #: glibc fallback); None where it cannot be asked (another process).
    clone_path: str | None
    clone_path_note: str
    notes: list[str] = dataclasses.field(default_factory=list)
    #: What rdmaspawn has in force there (the process's markers, or its own state).
    in_force: InForce = InForce()
    #: UCX's fork settings and what they do (:func:`.facts.ucx_fork_settings`).
    ucx: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict == "OK"

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["findings"] = [f.to_dict() for f in self.findings]
        d.pop("in_force")
        d["rdmaspawn"] = self.in_force.to_dict()
        d["environment"] = {k: {"value": v, "meaning": ENV_VARS[k]}
                            for k, v in self.environment.items()}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def to_text(self) -> str:
        who = "this process" if self.is_self else f"process {self.pid}"
        out = [f"rdmaspawn doctor: {who} (pid {self.pid})", ""]
        out.append("MADV_DONTFORK mappings (a fork() child gets none of these):"
                   if self.findings else "MADV_DONTFORK mappings: none")
        for f in self.findings:
            out += [f"  {f.mapping.describe()}  [risk: {f.risk}]", f"      {f.note}"]
        limit = "?" if self.max_map_count is None else str(self.max_map_count)
        out += [f"Mappings: {self.map_count} of vm.max_map_count {limit}", ""]

        release = "" if self.rdma_core is None else f", rdma-core {self.rdma_core}"
        if self.verbs_loaded:
            out.append(f"libibverbs: loaded ({self.verbs_library}{release})")
        elif self.verbs_library:
            out.append(f"libibverbs: not loaded; the system's is {self.verbs_library}{release}")
        else:
            out.append("libibverbs: not loaded, none found on the system")
        out += [f"  also loaded: {name} ({path})" for name, path in self.libraries.items()
                if name != "libibverbs"]
        out += [f"Fork status: {self.fork_status or 'unknown'} -- {self.fork_status_note}",
                f"Fork protection: {self.fork_protection.text}",
                f"Kernel: {self.kernel}; {self.rdma_netlink}",
                f"Fork repair: {self.fork_repair} -- {self.fork_repair_note}"]
        if self.ucx.get("loaded"):
            out.append(f"UCX: {self.ucx['note']}")
        out.append(f"Environment ({self.environment_source}):")
        for name, value in self.environment.items():
            out += ([f"  {name} unset"] if value is None
                    else [f"  {name}={value!r}", f"      {ENV_VARS[name]}"])

        out += [f"Python: {self.python}",
                f"  subprocess, default arguments: {self.subprocess_default}",
                f"  subprocess with preexec_fn/user/group/extra_groups: {self.subprocess_preexec}",
                f"  rdmaspawn: {self.in_force.text()}"]
        if self.is_self:
            out += [f"  rdmaspawn.patch() in force: {'yes' if self.patched else 'no'}",
                    f"  rdmaspawn.guard(): {self.guarded or 'off'}",
                    f"  rdmaspawn's clone path: {self.clone_path or 'unknown'} "
                    f"-- {self.clone_path_note}",
                    f"  multiprocessing start method: {self.mp_start_method or 'not set'} "
                    f"(default {self.mp_default_start_method})"]
        else:
            out.append(f"  rdmaspawn's engine: {'loaded' if self.engine_loaded else 'not loaded'}")
        out += [f"Note: {note}" for note in self.notes]
        verdict = self.verdict
        if self.verdict == "HAZARD" and self.in_force.by:
            verdict += f" (rdmaspawn: {self.in_force.text()})"
        out += ["", f"Verdict: {verdict}"] + [f"  - {p}" for p in self.problems]
        if self.advice:
            out += ["What to do:"] + [f"  - {a}" for a in self.advice]
        # Paths, libraries and the environment are the inspected process's:
        # each line escaped as a whole, so a newline in a name cannot add one.
        return "\n".join(printable(line) for line in out) + "\n"
