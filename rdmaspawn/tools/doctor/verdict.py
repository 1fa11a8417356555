"""From a report's facts to its verdict, the problems and what to do."""

from __future__ import annotations

from ..._host.forkrisk import RISK_ORDER
from .report import Report

__all__ = ["judge"]


def judge(r: Report) -> None:
    """Fill in ``verdict``, ``problems``, ``advice`` and the notes that follow from the facts."""
    risky = [f for f in r.findings if f.risk != "none"]
    if r.max_map_count and r.map_count > 0.9 * r.max_map_count:
        r.notes.append("the process is close to vm.max_map_count: every madvise() split adds "
                       "mappings, and mmap() fails with ENOMEM at the limit")
    if not risky:
        r.verdict = "OK"
        if r.findings:
            r.notes.append("only device mappings and buffers on pages of their own are "
                           "MADV_DONTFORK; fork() children that exec right away are not affected")
        return
    if r.fork_repair == "repaired" and r.verbs_loaded:
        r.verdict = "OK"
        r.notes.append("marked, repaired: the fork repair is in force in this process: "
                       "libibverbs marks only the pages wholly inside each registration, "
                       "and the next fork() after a libibverbs is found takes off the "
                       "earlier marks a child trips on (the kernel's, the drivers' and "
                       "buffers on pages of their own keep theirs); fork() children get "
                       "every page they can need")
        return
    r.verdict = "HAZARD"
    if r.ucx.get("loaded"):
        r.notes.append(r.ucx["note"])
    if r.in_force.by:
        r.notes.append(f"rdmaspawn in this process: {r.in_force.text()}")
    worst = max(risky, key=lambda f: RISK_ORDER[f.risk])
    kinds = ", ".join(sorted({f.kind for f in risky}))
    r.problems.append(
        f"{len(risky)} MADV_DONTFORK mapping(s) ({kinds}), worst: {worst.kind} at "
        f"0x{worst.mapping.start:x}: a fork()ed child does not get these pages and dies with "
        "SIGSEGV if it touches them -- and fork's own malloc handling touches them when they "
        "hold allocator memory"
    )
    a = r.advice
    if r.fork_repair == "repairable":
        a.append("marked, repairable: this kernel copies DMA-pinned pages at fork, so the "
                 "marks protect nothing: rdmaspawn.repair_fork() at start-up (or "
                 "RDMASPAWN=on, rdmaspawn run) keeps them off the pages a fork() child needs, and "
                 "os.fork() and multiprocessing's fork work again")
    elif r.fork_repair.startswith("not repairable"):
        r.notes.append(f"marked, {r.fork_repair}: {r.fork_repair_note}")
    a.append("rdmaspawn.patch() is in force: subprocess calls without preexec_fn start "
             "children with CLONE_VM|CLONE_VFORK and are safe" if r.patched else
             "start child processes with rdmaspawn.Popen / rdmaspawn.run, or call "
             "rdmaspawn.patch() once at startup so that subprocess uses them")
    if r.subprocess_default.startswith("fork()"):
        a.append("this Python's subprocess forks even with default arguments: without "
                 "rdmaspawn.patch() every subprocess call can crash its child")
    a.append("avoid preexec_fn, and user=/group=/extra_groups=, in subprocess calls: they "
             "force fork(); use start_new_session=, process_group= (3.11+), umask=, or a "
             "small wrapper program instead")
    method = r.mp_start_method or r.mp_default_start_method
    if not r.is_self or method == "fork":
        a.append("use multiprocessing's 'spawn' or 'forkserver' start method "
                 "(multiprocessing.set_start_method('spawn') or get_context('spawn')) "
                 "instead of 'fork'; set it before any RDMA memory is registered")
    a.append("do not call os.fork(), os.forkpty() or pty.fork()")
    if r.guarded != "raise":
        a.append("rdmaspawn.guard('raise') turns any remaining fork() into a clear "
                 "ForkHazardError instead of a crashed child")
    if r.fork_protection.marks and r.verbs_library:
        a.append("to remove the cause rather than dodge it, see 'Fork protection' above "
                 f"(case '{r.fork_protection.case}')")
