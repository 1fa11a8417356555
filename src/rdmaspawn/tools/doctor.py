"""``rdmaspawn doctor``: is it safe for this process (or another) to ``fork()``?

It reads ``/proc/PID/smaps`` for ``MADV_DONTFORK`` mappings (``dc``), says what
backs each one and whether it lies in memory that malloc or Python also use,
and gathers what decides whether a ``fork()`` happens and whether it hurts:
libibverbs and its fork status, the environment variables that switch fork
protection on, the kernel, the Python version and the paths its
``subprocess`` and ``multiprocessing`` take.  The verdict is ``OK`` or
``HAZARD`` with what to do.

Exit status of the command: 0 OK, 1 HAZARD, 2 the process could not be
inspected (no such process, not allowed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._procfs import (
    Mapping,
    NoSuchProcessError,
    parse_smaps,
    read_proc,
    read_smaps,
)

__all__ = ["Finding", "Report", "doctor", "main"]

# glibc's HEAP_MAX_SIZE (2 * DEFAULT_MMAP_THRESHOLD_MAX): every thread arena's
# heap is mmap()ed aligned to it and starts with its heap_info header.
ARENA_ALIGN = (64 if sys.maxsize > 2**32 else 1) * 1024 * 1024

#: Linux release from which the kernel copies DMA-pinned pages into the child
#: at fork() and reports it to rdma-core (RDMA netlink "copy-on-fork"), so
#: rdma-core >= 35 reports fork support "unneeded" and does not madvise.
COPY_ON_FORK_KERNEL = (5, 13)

#: What each variable that changes fork behaviour does.  Sources: the
#: ibv_fork_init(3) and ibv_is_fork_initialized(3) man pages (rdma-core),
#: libfabric's EFA provider (prov/efa, fork support), UCX's uct_ib_md config.
ENV_VARS: Dict[str, str] = {
    "RDMAV_FORK_SAFE": (
        "set to any value (even empty or 0): libibverbs calls ibv_fork_init() when it "
        "initialises, so every registered buffer is marked MADV_DONTFORK, rounded out to "
        "whole pages; a fork() child loses those pages. No effect where the kernel copies "
        "pinned pages on fork (fork status 'unneeded')"
    ),
    "IBV_FORK_SAFE": "older name of RDMAV_FORK_SAFE, same effect",
    "RDMAV_HUGEPAGES_SAFE": (
        "set to any value: with fork support on, libibverbs finds the real page size of "
        "each registered range, so on huge pages the MADV_DONTFORK area grows to whole "
        "huge pages; extra cost per registration"
    ),
    "FI_EFA_FORK_SAFE": (
        "libfabric EFA provider: 1 turns on libibverbs fork support (ibv_fork_init(), "
        "MADV_DONTFORK on registrations) and stops using huge pages for bounce buffers; "
        "unset or 0 on a kernel without copy-on-fork makes recent libfabric abort the "
        "process at fork() with a fork-safety message"
    ),
    "UCX_IB_FORK_INIT": (
        "UCX IB transports: 'try' (default) calls ibv_fork_init() and carries on if it "
        "fails, 'yes' calls it and fails without it, 'no' never calls it"
    ),
}

# Libraries worth naming when they are loaded: they call ibv_fork_init() or
# register memory.
_RDMA_LIBS = (
    ("libibverbs.so", "libibverbs"),
    ("libfabric.so", "libfabric"),
    ("libuct_ib", "UCX (uct_ib)"),
    ("libnccl", "NCCL"),
    ("libefa", "EFA verbs provider"),
    ("libmlx5", "mlx5 verbs provider"),
)

_RISK_ORDER = {"none": 0, "low": 1, "medium": 2, "high": 3}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One MADV_DONTFORK mapping and what it means."""

    mapping: Mapping
    #: "heap", "arena", "stack", "anon-adjacent", "anon", "file", "device", "other".
    kind: str
    #: "high", "medium", "low" or "none".
    risk: str
    #: Plain words: what backs it and why that matters.
    note: str

    def to_dict(self) -> Dict[str, Any]:
        m = self.mapping
        return {
            "start": "0x%x" % m.start,
            "end": "0x%x" % m.end,
            "size": m.size,
            "perms": m.perms,
            "path": m.path,
            "rss_kb": m.rss_kb,
            "vmflags": sorted(m.vmflags),
            "kind": self.kind,
            "risk": self.risk,
            "note": self.note,
        }


@dataclasses.dataclass
class Report:
    """What :func:`doctor` found.  ``verdict`` is ``"OK"`` or ``"HAZARD"``."""

    pid: int
    is_self: bool
    verdict: str
    problems: List[str]
    advice: List[str]
    findings: List[Finding]
    map_count: int
    max_map_count: Optional[int]
    libraries: Dict[str, str]
    verbs_loaded: bool
    verbs_library: Optional[str]
    fork_status: Optional[str]
    fork_status_note: str
    environment: Dict[str, Optional[str]]
    environment_source: str
    kernel: str
    kernel_copies_pinned_pages: Optional[bool]
    python: str
    subprocess_default: str
    subprocess_preexec: str
    patched: Optional[bool]
    guarded: Optional[str]
    mp_start_method: Optional[str]
    mp_default_start_method: Optional[str]
    notes: List[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == "OK"

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["findings"] = [f.to_dict() for f in self.findings]
        d["environment"] = {
            k: {"value": v, "meaning": ENV_VARS[k]} for k, v in self.environment.items()
        }
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def to_text(self) -> str:
        who = "this process" if self.is_self else "process %d" % self.pid
        out = ["rdmaspawn doctor: %s (pid %d)" % (who, self.pid), ""]
        if self.findings:
            out.append("MADV_DONTFORK mappings (a fork() child gets none of these):")
            for f in self.findings:
                out.append("  %s  [risk: %s]" % (f.mapping.describe(), f.risk))
                out.append("      %s" % f.note)
        else:
            out.append("MADV_DONTFORK mappings: none")
        limit = "?" if self.max_map_count is None else str(self.max_map_count)
        out.append("Mappings: %d of vm.max_map_count %s" % (self.map_count, limit))
        out.append("")
        if self.verbs_loaded:
            out.append("libibverbs: loaded (%s)" % self.verbs_library)
        else:
            out.append("libibverbs: not loaded")
        others = {k: v for k, v in self.libraries.items() if k != "libibverbs"}
        for name, path in others.items():
            out.append("  also loaded: %s (%s)" % (name, path))
        out.append("Fork status: %s -- %s" % (self.fork_status or "unknown", self.fork_status_note))
        out.append("Environment (%s):" % self.environment_source)
        for name, value in self.environment.items():
            shown = "unset" if value is None else "%r" % value
            out.append("  %s=%s" % (name, shown) if value is not None else "  %s %s" % (name, shown))
            if value is not None:
                out.append("      %s" % ENV_VARS[name])
        cof = {True: "yes", False: "no", None: "unknown"}[self.kernel_copies_pinned_pages]
        out.append("Kernel: %s (copies DMA-pinned pages on fork: %s)" % (self.kernel, cof))
        out.append("Python: %s" % self.python)
        out.append("  subprocess, default arguments: %s" % self.subprocess_default)
        out.append("  subprocess with preexec_fn/user/group/extra_groups: %s" % self.subprocess_preexec)
        if self.is_self:
            out.append("  rdmaspawn.patch() in force: %s" % ("yes" if self.patched else "no"))
            out.append("  rdmaspawn.guard(): %s" % (self.guarded or "off"))
            out.append("  multiprocessing start method: %s (default %s)"
                       % (self.mp_start_method or "not set", self.mp_default_start_method))
        for note in self.notes:
            out.append("Note: %s" % note)
        out.append("")
        out.append("Verdict: %s" % self.verdict)
        for p in self.problems:
            out.append("  - %s" % p)
        if self.advice:
            out.append("What to do:")
            for a in self.advice:
                out.append("  - %s" % a)
        return "\n".join(out) + "\n"


# -- classification -----------------------------------------------------------


def _arena_base(m: Mapping, by_start: Dict[int, Mapping], ordered: List[Mapping]) -> Optional[int]:
    """The heap_info address if ``m`` lies in a glibc thread-arena heap, else None.

    A thread heap is an anonymous reservation of exactly ARENA_ALIGN bytes at an
    ARENA_ALIGN-aligned address: read-write pages first, PROT_NONE after.
    madvise() splits it into several mappings, so check that anonymous
    mappings cover the whole aligned block with no gap.
    """
    if not m.anonymous:
        return None
    base = m.start - (m.start % ARENA_ALIGN)
    first = by_start.get(base)
    if first is None or not first.anonymous or not first.perms.startswith("rw"):
        return None
    end = base + ARENA_ALIGN
    pos = base
    for x in ordered:
        if x.end <= base or x.start >= end:
            continue
        if x.start != pos or not x.anonymous:
            return None
        pos = x.end
    return base if pos >= end else None


def _classify(m: Mapping, ordered: List[Mapping]) -> Finding:
    by_start = {x.start: x for x in ordered}
    by_end = {x.end: x for x in ordered}
    path = m.path
    if m.device:
        return Finding(m, "device", "none",
                       "device memory mapped by its driver (%s), marked by the driver; "
                       "a child that only execs never touches it" % path)
    if path == "[heap]":
        return Finding(m, "heap", "high",
                       "the main malloc heap (brk): malloc's chunk headers and Python objects "
                       "live here; a fork() child that allocates or frees memory crashes")
    if path == "[stack]":
        return Finding(m, "stack", "high",
                       "the main thread's stack: a fork() child crashes at once")
    base = _arena_base(m, by_start, ordered)
    if base is not None:
        where = "its heap_info header and malloc_state" if m.start == base else "its chunks"
        return Finding(m, "arena", "high",
                       "inside a glibc thread malloc arena (heap at 0x%x, %s): glibc's fork "
                       "handler and every malloc/free in the child touch it" % (base, where))
    if m.anonymous:
        neighbours = [x for x in (by_end.get(m.start), by_start.get(m.end)) if x is not None]
        near = [x for x in neighbours
                if x.anonymous or x.path == "[heap]" or _arena_base(x, by_start, ordered)]
        if near:
            what = ", ".join(x.path or "anonymous 0x%x" % x.start for x in near)
            return Finding(m, "anon-adjacent", "medium",
                           "anonymous memory bordering other anonymous memory (%s): likely split "
                           "off a malloc'd block or memory next to Python's object arenas; the "
                           "rest of those pages is lost to a fork() child" % what)
        return Finding(m, "anon", "low",
                       "an anonymous mapping of its own (a page-aligned buffer, e.g. mmap or "
                       "posix_memalign): a fork() child crashes only if it touches this buffer")
    if path.startswith("/") or path.startswith("/dev/shm/"):
        return Finding(m, "file", "low",
                       "a mapped file or shared memory (%s): a fork() child crashes only if it "
                       "touches it" % path)
    return Finding(m, "other", "low", "kernel pseudo-mapping %s" % path)


# -- facts about a process ----------------------------------------------------


def _maps_libraries(pid: Any) -> Dict[str, str]:
    """Name -> path of the RDMA-related libraries mapped in the process."""
    try:
        text = read_proc(pid, "maps").decode("utf-8", "surrogateescape")
    except OSError:
        return {}
    found: Dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5]
        base = os.path.basename(path)
        for prefix, name in _RDMA_LIBS:
            if base.startswith(prefix) and name not in found:
                found[name] = path
    return found


def _max_map_count() -> Optional[int]:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _kernel() -> Tuple[str, Optional[bool]]:
    release = platform.release()
    m = re.match(r"(\d+)\.(\d+)", release)
    if not m:
        return release, None
    return release, (int(m.group(1)), int(m.group(2))) >= COPY_ON_FORK_KERNEL


def _environ_of(pid: int, is_self: bool) -> Tuple[Dict[str, Optional[str]], str]:
    if is_self:
        return {k: os.environ.get(k) for k in ENV_VARS}, "this process, now"
    try:
        raw = read_proc(pid, "environ")
    except OSError as e:
        return {k: None for k in ENV_VARS}, "unreadable: %s" % (e.strerror or e)
    env: Dict[str, str] = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[os.fsdecode(k)] = os.fsdecode(v)
    return {k: env.get(k) for k in ENV_VARS}, "as the process started (/proc/%d/environ)" % pid


def _subprocess_paths(version: Tuple[int, int], use_vfork: bool = True) -> Tuple[str, str]:
    if version < (3, 10):
        default = ("fork() then exec (3.9 has no vfork; posix_spawn only with close_fds=False "
                   "and no other options)")
    elif not use_vfork:
        default = "fork() then exec (subprocess._USE_VFORK is False)"
    else:
        default = "vfork() then exec (safe: the child shares the parent's memory)"
    return default, "fork() then exec (the child runs Python code or changes ids)"


def _self_facts() -> Dict[str, Any]:
    facts: Dict[str, Any] = {}
    try:
        from rdmaspawn import _engine

        st = _engine.fork_status()
        facts["fork_status"] = st.state
        facts["fork_library"] = st.library
    except Exception as e:  # engine not built or libibverbs trouble: say so, do not fail
        facts["fork_status"] = None
        facts["fork_error"] = "%s: %s" % (type(e).__name__, e)
    try:
        from rdmaspawn.dropin import patch as _patch

        facts["patched"] = bool(_patch.is_patched())
    except Exception:
        facts["patched"] = None
    # Only look at the guard if something imported it: not imported, not on.
    guard_mod = sys.modules.get("rdmaspawn.tools.guard")
    facts["guarded"] = guard_mod.is_guarded() if guard_mod is not None else None
    import multiprocessing
    import multiprocessing.context as mpctx

    facts["mp_start_method"] = multiprocessing.get_start_method(allow_none=True)
    try:
        facts["mp_default"] = mpctx._default_context._default_context._name  # type: ignore[attr-defined]
    except AttributeError:
        facts["mp_default"] = None
    import subprocess

    facts["use_vfork"] = bool(getattr(subprocess, "_USE_VFORK", True))
    return facts


_FORK_NOTES = {
    "unavailable": "libibverbs is not loaded in this process, so it has marked nothing",
    "disabled": "ibv_fork_init() has not run: libibverbs does not madvise "
                "registrations (other code still may)",
    "enabled": "ibv_fork_init() has run: every ibv_reg_mr() marks its pages MADV_DONTFORK",
    "unneeded": "the kernel copies DMA-pinned pages on fork; libibverbs marks nothing",
}


def _other_python(pid: int) -> str:
    try:
        exe = os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return "unknown (cannot read /proc/%d/exe)" % pid
    m = re.search(r"python(\d+\.\d+)", os.path.basename(exe))
    if m:
        return "%s (from its executable %s)" % (m.group(1), exe)
    return "unknown (executable %s)" % exe


def doctor(pid: Optional[int] = None) -> Report:
    """Inspect this process (``pid=None``) or another one and return a :class:`Report`.

    Raises :class:`~rdmaspawn._procfs.NoSuchProcessError` (a
    ``ProcessLookupError`` and ``FileNotFoundError``) when there is no such
    process and ``PermissionError`` when its memory map may not be read.
    """
    is_self = pid is None or pid == os.getpid()
    target: Any = "self" if is_self else pid
    real_pid = os.getpid() if is_self else int(pid)  # type: ignore[arg-type]
    mappings = parse_smaps(read_smaps(target))
    findings = [_classify(m, mappings) for m in mappings if m.dontfork]
    libs = _maps_libraries(target)
    kernel, cof = _kernel()
    env, env_source = _environ_of(real_pid, is_self)
    notes: List[str] = []
    if mappings and not any(m.vmflags for m in mappings):
        notes.append("this kernel does not show VmFlags in smaps (Linux < 3.8): "
                     "MADV_DONTFORK mappings cannot be seen")

    verbs_path = libs.get("libibverbs")
    if is_self:
        facts = _self_facts()
        version: Tuple[int, int] = sys.version_info[:2]
        python = "%s (%s)" % (platform.python_version(), sys.executable)
        fork_status = facts.get("fork_status")
        if fork_status is None:
            fork_note = "cannot ask libibverbs (%s)" % facts.get("fork_error", "unknown error")
        else:
            fork_note = _FORK_NOTES.get(fork_status, "")
            if not verbs_path and fork_status != "unavailable":
                fork_note = ("libibverbs is not loaded here; this is what it would say if it "
                             "were (%s): %s" % (facts.get("fork_library"), fork_note))
        default, preexec = _subprocess_paths(version, facts["use_vfork"])
        patched, guarded = facts["patched"], facts["guarded"]
        mp_method, mp_default = facts["mp_start_method"], facts["mp_default"]
        if patched:
            default = "rdmaspawn engine (CLONE_VM|CLONE_VFORK, safe): rdmaspawn.patch() is in force"
    else:
        fork_status = None
        python = _other_python(real_pid)
        m = re.match(r"(\d+)\.(\d+)", python)
        if m:
            default, preexec = _subprocess_paths((int(m.group(1)), int(m.group(2))))
        else:
            default = preexec = "unknown (not a recognisable Python executable)"
        patched = guarded = None
        mp_method = mp_default = None
        inferred = []
        if verbs_path:
            inferred.append("libibverbs is loaded")
        else:
            inferred.append("libibverbs is not loaded")
        if env.get("RDMAV_FORK_SAFE") is not None or env.get("IBV_FORK_SAFE") is not None:
            inferred.append("its environment asks for fork protection (RDMAV_FORK_SAFE/IBV_FORK_SAFE)")
        if any(f.risk != "none" for f in findings):
            inferred.append("something in it called madvise(MADV_DONTFORK)")
        fork_note = ("only the process itself can ask libibverbs; from outside: "
                     + "; ".join(inferred))

    report = Report(
        pid=real_pid,
        is_self=is_self,
        verdict="OK",
        problems=[],
        advice=[],
        findings=findings,
        map_count=len(mappings),
        max_map_count=_max_map_count(),
        libraries=libs,
        verbs_loaded=verbs_path is not None,
        verbs_library=verbs_path,
        fork_status=fork_status,
        fork_status_note=fork_note,
        environment=env,
        environment_source=env_source,
        kernel=kernel,
        kernel_copies_pinned_pages=cof,
        python=python,
        subprocess_default=default,
        subprocess_preexec=preexec,
        patched=patched,
        guarded=guarded,
        mp_start_method=mp_method,
        mp_default_start_method=mp_default,
        notes=notes,
    )
    _judge(report)
    return report


def _judge(r: Report) -> None:
    risky = [f for f in r.findings if f.risk != "none"]
    if r.max_map_count and r.map_count > 0.9 * r.max_map_count:
        r.notes.append("the process is close to vm.max_map_count: every madvise() split adds "
                       "mappings, and mmap() fails with ENOMEM at the limit")
    if not risky:
        r.verdict = "OK"
        if r.findings:
            r.notes.append("only device mappings are MADV_DONTFORK; fork() children that exec "
                           "right away are not affected")
        return
    r.verdict = "HAZARD"
    worst = max(risky, key=lambda f: _RISK_ORDER[f.risk])
    kinds = sorted({f.kind for f in risky})
    r.problems.append(
        "%d MADV_DONTFORK mapping(s) (%s), worst: %s at 0x%x: a fork()ed child does not get "
        "these pages and dies with SIGSEGV if it touches them -- and fork's own malloc "
        "handling touches them when they hold allocator memory"
        % (len(risky), ", ".join(kinds), worst.kind, worst.mapping.start)
    )
    a = r.advice
    if r.is_self and r.patched:
        a.append("rdmaspawn.patch() is in force: subprocess calls without preexec_fn start "
                 "children with CLONE_VM|CLONE_VFORK and are safe")
    else:
        a.append("start child processes with rdmaspawn.Popen / rdmaspawn.run, or call "
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
    if not (r.is_self and r.guarded == "raise"):
        a.append("rdmaspawn.guard('raise') turns any remaining fork() into a clear "
                 "ForkHazardError instead of a crashed child")
    if any(r.environment.get(k) is not None for k in ("RDMAV_FORK_SAFE", "IBV_FORK_SAFE")) \
            and r.kernel_copies_pinned_pages:
        a.append("RDMAV_FORK_SAFE/IBV_FORK_SAFE is set but this kernel copies pinned pages on "
                 "fork; with rdma-core >= 35 it is not needed")


# -- command line -------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None, prog: str = "rdmaspawn doctor") -> int:
    """``rdmaspawn doctor [--pid PID] [--json]``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Check whether a process can safely fork() (MADV_DONTFORK memory, "
                    "libibverbs fork support, subprocess and multiprocessing paths).",
    )
    parser.add_argument("--pid", type=int, default=None,
                        help="inspect this process instead of the doctor's own")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        if args.pid is not None and args.pid <= 0:
            raise ValueError("pid must be positive, not %d" % args.pid)
        report = doctor(args.pid)
    except NoSuchProcessError:
        return _fail("no process with pid %s" % args.pid, args.json)
    except PermissionError:
        return _fail("not allowed to read the memory map of pid %s (run as the same user, "
                     "or as root)" % args.pid, args.json)
    except (OSError, ValueError) as e:
        return _fail(str(e), args.json)
    sys.stdout.write(report.to_json() + "\n" if args.json else report.to_text())
    return report.exit_code


def _fail(message: str, as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json.dumps({"error": message}) + "\n")
    sys.stderr.write("rdmaspawn doctor: %s\n" % message)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
