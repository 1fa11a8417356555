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
from .facts import ENGINE_MODULE, ENV_VARS, RDMA_LIBS, ucx_fork_settings
from .inforce import InForce, from_mappings
from .protection import judge_protection, verbs_facts
from .report import Report
from .verdict import judge

__all__ = ["doctor", "environ_of", "mapped_libraries"]

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
    names = dict(RDMA_LIBS, **{ENGINE_MODULE: "rdmaspawn engine"})
    try:
        found = library_paths(list(names), pid)
    except OSError:
        return {}
    return {names[prefix]: path for prefix, path in found.items()}


def environ_of(pid: int, is_self: bool) -> tuple[dict[str, str | None], str, bool]:
    """The variables of :data:`.facts.ENV_VARS` in the process, where they come
    from, and whether they could be read."""
    if is_self:
        return {k: os.environ.get(k) for k in ENV_VARS}, "this process, now", True
    try:
        env = read_environ(pid)
    except OSError as e:
        return {k: None for k in ENV_VARS}, f"unreadable: {e.strerror or e}", False
    return ({k: env.get(k) for k in ENV_VARS}, f"as the process started (/proc/{pid}/environ)",
            True)


def _subprocess_paths(version: tuple[int, int], use_vfork: bool = True) -> tuple[str, str]:
    if version < (3, 10):
        default = ("fork() then exec (3.9 has no vfork; posix_spawn only with close_fds=False "
                   "and no other options)")
    elif not use_vfork:
        default = "fork() then exec (subprocess._USE_VFORK is False; 3.10-3.13 only)"
    else:
        default = "vfork() then exec (safe: the child shares the parent's memory)"
    return default, "fork() then exec (the child runs Python code or changes ids)"


def _fork_status() -> tuple[str | None, str | None, str]:
    """libibverbs' fork status as this process's libibverbs (or the system's) reports
    it, the library asked, and why it could not be asked."""
    try:
        from rdmaspawn._native.forkstatus import fork_status

        st = fork_status()
        return st.state, st.library, ""
    except Exception as e:  # engine not built or libibverbs trouble: say so, do not fail
        return None, None, f"{type(e).__name__}: {e}"


def _clone_path() -> tuple[str | None, str]:
    """The system call this process's engine starts children with, and why."""
    try:
        from rdmaspawn._native import engine as _engine

        path = _engine.clone_path()
        return path.method, path.reason
    except Exception as e:  # engine not built: say so, do not fail
        return None, f"cannot ask the engine ({type(e).__name__}: {e})"


def _own_in_force() -> tuple[bool | None, str | None]:
    """Whether patch() is in force here, and the guard's mode: looked at only where
    something imported the guard, or where RDMASPAWN's stand-ins wait to load it."""
    try:
        from rdmaspawn.dropin import patch as _patch

        patched: bool | None = bool(_patch.is_patched())
    except Exception:
        patched = None
    standin = sys.modules.get("rdmaspawn._startup.standin")
    if standin is not None and standin.forks_pending():
        import rdmaspawn.tools.guard  # noqa: F401  # what the first fork would load
    guard_mod = sys.modules.get("rdmaspawn.tools.guard")
    return patched, guard_mod.is_guarded() if guard_mod is not None else None


def _other_python(pid: int) -> tuple[str, tuple[int, int] | None]:
    """Another process's Python in words, and its version where its executable says."""
    try:
        exe = exe_path(pid)
    except OSError:
        return f"unknown (cannot read /proc/{pid}/exe)", None
    m = re.search(r"python(\d+)\.(\d+)", os.path.basename(exe))
    if m:
        return f"{m[1]}.{m[2]} (from its executable {exe})", (int(m[1]), int(m[2]))
    return f"unknown (executable {exe})", None


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
    env, env_source, known = environ_of(real_pid, is_self)
    ucx = ucx_fork_settings(env, libs, known)
    notes: list[str] = []
    if mappings and not any(m.vmflags for m in mappings):
        notes.append("this kernel does not show VmFlags in smaps (Linux < 3.8): "
                     "MADV_DONTFORK mappings cannot be seen")

    loaded_verbs = libs.get("libibverbs")
    fork_status, system_verbs, fork_error = _fork_status()
    verbs_path = loaded_verbs or (os.path.realpath(system_verbs) if system_verbs else None)
    mp_method = mp_default = clone_path = None
    if is_self:
        python = f"{platform.python_version()} ({sys.executable})"
        if fork_status is None:
            fork_note = f"cannot ask libibverbs ({fork_error})"
        else:
            fork_note = _FORK_NOTES.get(fork_status, "")
            if not loaded_verbs and fork_status != "unavailable":
                fork_note = ("libibverbs is not loaded here; this is what it would say if it "
                             f"were ({system_verbs}): {fork_note}")
        patched, guarded = _own_in_force()
        import multiprocessing

        mp_method = multiprocessing.get_start_method(allow_none=True)
        mp_default = default_method()
        default, preexec = _subprocess_paths(sys.version_info[:2], _cpython.use_vfork_flag())
        clone_path, clone_note = _clone_path()
        if patched:
            default = "rdmaspawn engine (CLONE_VM|CLONE_VFORK, safe): rdmaspawn.patch() is in force"
    else:
        python, version = _other_python(real_pid)
        default, preexec = (_subprocess_paths(version) if version else
                            ("unknown (not a recognisable Python executable)",) * 2)
        in_force = from_mappings(mappings)
        patched, guarded = in_force.patched, in_force.guarded
        fork_status = None
        clone_note = "only the process itself can ask its engine"
        fork_note = _outside_fork_note(loaded_verbs, env, findings)

    verbs = verbs_facts(verbs_path, fork_status)
    repair, repair_note = _fork_repair(mappings, env, verbs.netlink_copy_on_fork)
    if is_self:
        in_force = InForce(patched, guarded, repair == "repaired", known=True)
    report = Report(
        pid=real_pid, is_self=is_self, verdict="OK", problems=[], advice=[],
        findings=findings, map_count=len(mappings), max_map_count=max_map_count(),
        libraries=libs, verbs_loaded=loaded_verbs is not None, verbs_library=verbs_path,
        rdma_core=verbs.rdma_core, fork_status=fork_status, fork_status_note=fork_note,
        fork_protection=judge_protection(verbs), environment=env,
        environment_source=env_source, kernel=verbs.kernel,
        kernel_copies_pinned_pages=verbs.kernel_copies, rdma_netlink=verbs.netlink_note,
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
