"""Gather the facts about one process (this one or another) into a :class:`Report`."""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Any

from ..._host.forkrisk import classify
from ..._host.processinfo import exe_path, read_environ
from ..._host.procfs import Mapping, Pid, all_mappings, library_paths, max_map_count
from ..._native.forkrepair import IN_FORCE, USE_MADVISE
from ..._native.forkrepair import MARKER as REPAIR_MARKER
from ...dropin import cpython as _cpython
from ...dropin.startmethod import default_method
from .facts import (
    ENGINE_MODULE,
    ENV_VARS,
    RDMA_LIBS,
    kernel_copies_pinned_pages,
    rdma_core_version,
    rdma_netlink_copy_on_fork,
    ucx_fork_settings,
)
from .inforce import InForce, from_mappings
from .protection import VerbsFacts, judge_protection
from .report import Report
from .verdict import judge

__all__ = ["doctor", "mapped_libraries"]

_FORK_NOTES = {
    "unavailable": "libibverbs is not loaded in this process, so it has marked nothing",
    "disabled": "ibv_fork_init() has not run: libibverbs does not madvise "
                "registrations (other code still may)",
    "enabled": "ibv_fork_init() has run: every ibv_reg_mr() marks its pages MADV_DONTFORK",
    "unneeded": "the kernel copies DMA-pinned pages on fork; libibverbs marks nothing",
    "unknown": "this libibverbs (rdma-core < 35) cannot say whether ibv_fork_init() has "
               "run, and nothing it marked is mapped: another library may have turned "
               "fork protection on, to mark what it registers next",
}


def mapped_libraries(pid: Pid) -> dict[str, str]:
    """Name -> path of the RDMA libraries, and rdmaspawn's engine, mapped in the process."""
    try:
        found = library_paths([p for p, _ in RDMA_LIBS] + [ENGINE_MODULE], pid)
    except OSError:
        return {}
    names = dict(RDMA_LIBS, **{ENGINE_MODULE: "rdmaspawn engine"})
    return {names[prefix]: path for prefix, path in found.items()}


def _environ_of(pid: int, is_self: bool) -> tuple[dict[str, str | None], str]:
    if is_self:
        return {k: os.environ.get(k) for k in ENV_VARS}, "this process, now"
    try:
        env = read_environ(pid)
    except OSError as e:
        return {k: None for k in ENV_VARS}, f"unreadable: {e.strerror or e}"
    return {k: env.get(k) for k in ENV_VARS}, f"as the process started (/proc/{pid}/environ)"


def _subprocess_paths(version: tuple[int, int], use_vfork: bool = True) -> tuple[str, str]:
    if version < (3, 10):
        default = ("fork() then exec (3.9 has no vfork; posix_spawn only with close_fds=False "
                   "and no other options)")
    elif not use_vfork:
        default = "fork() then exec (subprocess._USE_VFORK is False; 3.10-3.13 only)"
    else:
        default = "vfork() then exec (safe: the child shares the parent's memory)"
    return default, "fork() then exec (the child runs Python code or changes ids)"


def _engine_facts() -> dict[str, Any]:
    """libibverbs' fork status as this process's libibverbs (or the system's) reports it."""
    try:
        from rdmaspawn._native.forkstatus import fork_status

        st = fork_status()
        return {"fork_status": st.state, "fork_library": st.library}
    except Exception as e:  # engine not built or libibverbs trouble: say so, do not fail
        return {"fork_status": None, "fork_library": None,
                "fork_error": f"{type(e).__name__}: {e}"}


def _clone_path() -> tuple[str | None, str]:
    """The system call this process's engine starts children with, and why."""
    try:
        from rdmaspawn._native import engine as _engine

        path = _engine.clone_path()
        return path.method, path.reason
    except Exception as e:  # engine not built: say so, do not fail
        return None, f"cannot ask the engine ({type(e).__name__}: {e})"


def _guard_mode() -> str | None:
    """The guard's mode: looked at only where something imported it, or
    where RDMASPAWN's stand-ins wait to load it (not imported, not on)."""
    standin = sys.modules.get("rdmaspawn._startup.standin")
    if standin is not None and standin.forks_pending():
        import rdmaspawn.tools.guard  # noqa: F401  # what the first fork would load
    guard_mod = sys.modules.get("rdmaspawn.tools.guard")
    return guard_mod.is_guarded() if guard_mod is not None else None


def _self_facts() -> dict[str, Any]:
    facts = _engine_facts()
    try:
        from rdmaspawn.dropin import patch as _patch

        facts["patched"] = bool(_patch.is_patched())
    except Exception:
        facts["patched"] = None
    facts["guarded"] = _guard_mode()
    import multiprocessing

    facts["mp_start_method"] = multiprocessing.get_start_method(allow_none=True)
    facts["mp_default"] = default_method()
    facts["use_vfork"] = _cpython.use_vfork_flag()
    facts["clone_path"], facts["clone_path_note"] = _clone_path()
    return facts


def _other_python(pid: int) -> str:
    try:
        exe = exe_path(pid)
    except OSError:
        return f"unknown (cannot read /proc/{pid}/exe)"
    m = re.search(r"python(\d+\.\d+)", os.path.basename(exe))
    if m:
        return f"{m.group(1)} (from its executable {exe})"
    return f"unknown (executable {exe})"


def doctor(pid: int | None = None) -> Report:
    """Inspect this process (``pid=None``) or another one and return a :class:`Report`.

    Raises :class:`~rdmaspawn._host.procfs.NoSuchProcessError` (a
    ``ProcessLookupError`` and ``FileNotFoundError``) when there is no such
    process and ``PermissionError`` when its memory map may not be read.
    """
    is_self = pid is None or pid == os.getpid()
    target: Pid = "self" if is_self or pid is None else pid
    real_pid = os.getpid() if is_self or pid is None else pid
    mappings = all_mappings(target)
    findings = [classify(m, mappings, target) for m in mappings if m.dontfork]
    libs = mapped_libraries(target)
    env, env_source = _environ_of(real_pid, is_self)
    ucx = ucx_fork_settings(env, libs, known=not env_source.startswith("unreadable"))
    notes: list[str] = []
    if mappings and not any(m.vmflags for m in mappings):
        notes.append("this kernel does not show VmFlags in smaps (Linux < 3.8): "
                     "MADV_DONTFORK mappings cannot be seen")

    loaded_verbs = libs.get("libibverbs")
    facts = _self_facts() if is_self else _engine_facts()
    system_verbs = facts.get("fork_library")
    verbs_path = loaded_verbs or (os.path.realpath(system_verbs) if system_verbs else None)
    if is_self:
        version: tuple[int, int] = sys.version_info[:2]
        python = f"{platform.python_version()} ({sys.executable})"
        fork_status = facts["fork_status"]
        if fork_status is None:
            fork_note = f"cannot ask libibverbs ({facts.get('fork_error', 'unknown error')})"
        else:
            fork_note = _FORK_NOTES.get(fork_status, "")
            if not loaded_verbs and fork_status != "unavailable":
                fork_note = ("libibverbs is not loaded here; this is what it would say if it "
                             f"were ({facts.get('fork_library')}): {fork_note}")
        default, preexec = _subprocess_paths(version, facts["use_vfork"])
        patched, guarded = facts["patched"], facts["guarded"]
        clone_path, clone_note = facts["clone_path"], facts["clone_path_note"]
        mp_method, mp_default = facts["mp_start_method"], facts["mp_default"]
        if patched:
            default = "rdmaspawn engine (CLONE_VM|CLONE_VFORK, safe): rdmaspawn.patch() is in force"
    else:
        python = _other_python(real_pid)
        m = re.match(r"(\d+)\.(\d+)", python)
        if m:
            default, preexec = _subprocess_paths((int(m.group(1)), int(m.group(2))))
        else:
            default = preexec = "unknown (not a recognisable Python executable)"
        in_force = from_mappings(mappings)
        patched, guarded = in_force.patched, in_force.guarded
        mp_method = mp_default = fork_status = clone_path = None
        clone_note = "only the process itself can ask its engine"
        fork_note = _outside_fork_note(loaded_verbs, env, findings)

    cof, netlink_note = rdma_netlink_copy_on_fork()
    repair, repair_note = _fork_repair(mappings, env, cof)
    if is_self:
        in_force = InForce(patched, guarded, repair == "repaired", known=True)
    verbs = VerbsFacts(
        kernel=platform.release(),
        kernel_copies=kernel_copies_pinned_pages(),
        verbs_path=verbs_path,
        rdma_core=rdma_core_version(verbs_path),
        netlink_copy_on_fork=cof,
        netlink_note=netlink_note,
        fork_status=fork_status,
    )
    report = Report(
        pid=real_pid, is_self=is_self, verdict="OK", problems=[], advice=[],
        findings=findings, map_count=len(mappings), max_map_count=max_map_count(),
        libraries=libs, verbs_loaded=loaded_verbs is not None, verbs_library=verbs_path,
        rdma_core=verbs.rdma_core, fork_status=fork_status, fork_status_note=fork_note,
        fork_protection=judge_protection(verbs), environment=env,
        environment_source=env_source, kernel=verbs.kernel,
        kernel_copies_pinned_pages=verbs.kernel_copies, rdma_netlink=netlink_note,
        python=python, subprocess_default=default, subprocess_preexec=preexec,
        fork_repair=repair, fork_repair_note=repair_note,
        engine_loaded="rdmaspawn engine" in libs, patched=patched, guarded=guarded,
        mp_start_method=mp_method, mp_default_start_method=mp_default,
        clone_path=clone_path, clone_path_note=clone_note, notes=notes,
        in_force=in_force, ucx=ucx,
    )
    judge(report)
    return report


def _fork_repair(mappings: list[Mapping], env: dict[str, str | None],
                 copies: bool | None) -> tuple[str, str]:
    """The fork repair's word for a process, and what it means (one rule, self or not)."""
    if any(m.path.startswith(REPAIR_MARKER) for m in mappings):
        return "repaired", IN_FORCE
    if env.get(USE_MADVISE) is not None:
        return "not repairable", f"{USE_MADVISE} is set: the marks were asked for"
    if copies:
        return "repairable", ("the kernel copies DMA-pinned pages at fork: "
                              "rdmaspawn.repair_fork() (in RDMASPAWN=on and rdmaspawn run) "
                              "keeps libibverbs' marks off the pages a fork() child needs")
    return "not repairable on this kernel", ("the kernel does not say it copies DMA-pinned "
                                             "pages at fork: the marks protect registered "
                                             "memory here")


def _outside_fork_note(verbs_path: str | None, env: dict[str, str | None],
                       findings: list[Any]) -> str:
    inferred = ["libibverbs is loaded" if verbs_path else "libibverbs is not loaded"]
    if env.get("RDMAV_FORK_SAFE") is not None or env.get("IBV_FORK_SAFE") is not None:
        inferred.append("its environment asks for fork protection (RDMAV_FORK_SAFE/IBV_FORK_SAFE)")
    if any(f.risk != "none" for f in findings):
        inferred.append("something in it called madvise(MADV_DONTFORK)")
    return "only the process itself can ask libibverbs; from outside: " + "; ".join(inferred)
