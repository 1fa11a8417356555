"""What the fork repair keeps marked and what it leaves (csrc/forkrepair.c,
csrc/unmark.c): exactly the pages a fork() child can need are unmarked.

- A registration made once the repair found libibverbs keeps libibverbs'
  mark on the pages wholly inside it (a child never had those under
  ``ibv_fork_init()``, and the kernel would copy them into every child);
  its first and last page, which it may share with other data, are not
  marked. With fewer than two inner pages nothing is marked (a mark splits
  the mapping; docs/how-it-works.md has the measurement).
- The one-time sweep of earlier marks takes off only those a child trips on
  (the doctor's rule, rdmaspawn/_host/forkrisk.py): a program's own buffer on
  pages of its own, a kernel mapping, and the repair's own marks stay.

Started without the kernel's word (``start_without_asking``), over marks made
by the real libibverbs (``ibv_dontfork_range()``, what ``ibv_reg_mr()`` does)
and by ``madvise()``: nothing is registered, so nothing is pinned.
"""

from __future__ import annotations

import os
import textwrap

import pytest
from helpers.hazard import require_verbs
from helpers.repair import doctor_on_holder, run

from rdmaspawn._rdmaspawn_cffi import lib


@pytest.fixture(scope="module", autouse=True)
def _verbs() -> None:
    require_verbs()


# libibverbs with fork protection on (it marks), the repair started (it finds
# this libibverbs), and libc's malloc.
STARTED = """
verbs = ctypes.CDLL("libibverbs.so.1")
verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
verbs.ibv_dofork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
assert verbs.ibv_fork_init() == 0
forkrepair.start_without_asking()
libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p
"""

# Registrations after the start: blocks of malloc (a block it maps, and one
# in a thread's arena) with ends that are not page-aligned.
EXACT = STARTED + textwrap.dedent("""
    from rdmaspawn._host.procfs import mapping_at
    import mmap
    page = mmap.PAGESIZE
    def register_in_a_thread(size, out):
        p = libc.malloc(size)  # a thread's arena below the mmap threshold
        out.append(p)
    blocks = {}
    blocks["mapped"] = (libc.malloc((1 << 20) + 100) + 40, (1 << 20) - 3)
    arena = []
    t = threading.Thread(target=register_in_a_thread, args=(100000, arena)); t.start(); t.join()
    blocks["arena"] = (arena[0] + 8, 100000 - 20)
    libc.aligned_alloc.restype = ctypes.c_void_p
    blocks["small"] = (libc.aligned_alloc(page, 4 * page) + 8, 2 * page)  # one whole page inside
    report = {}
    for name, (p, n) in blocks.items():
        assert verbs.ibv_dontfork_range(p, n) == 0
        inner = [m for m in (mapping_at(p + n // 2),) if m is not None and m.dontfork]
        child = {}
        for where, at in (("edges", [p, p + n - 1]), ("inner", [p + n // 2])):
            pid = os.fork()
            if pid == 0:
                for a in at:
                    ctypes.string_at(a, 1)
                os._exit(0)
            child[where] = outcome(os.waitpid(pid, 0)[1])
        report[name] = {
            "first": is_dontfork(p), "last": is_dontfork(p + n - 1),
            "mark": [inner[0].start, inner[0].end] if inner else None,
            "whole_pages": [(p + page - 1) // page * page, (p + n) // page * page],
            "vouched": bool(inner) and forkrepair.vouches(inner[0].start, inner[0].end),
            "child": child,
        }
        assert verbs.ibv_dofork_range(p, n) == 0
        report[name]["after"] = is_dontfork(p + n // 2)
        report[name]["vouched_after"] = bool(inner) and forkrepair.vouches(inner[0].start,
                                                                           inner[0].end)
    report["state"] = forkrepair.repair_state()._asdict()
""")


def test_a_registration_keeps_its_inner_pages_marked_and_its_edges_not() -> None:
    """libibverbs' mark over a registration with unaligned ends covers exactly
    the pages wholly inside it: a fork child reads its first and last byte (the
    pages it may share with malloc's or Python's data) and dies on an inner
    page, as under ibv_fork_init() alone. Deregistration takes the mark off.
    With fewer than two inner pages, nothing is marked."""
    r = run(EXACT)
    for name in ("mapped", "arena"):
        b = r[name]
        assert (b["first"], b["last"]) == (False, False), (name, b)
        assert b["mark"] == b["whole_pages"], (name, b)
        assert b["vouched"] and not b["vouched_after"] and not b["after"], (name, b)
        assert b["child"] == {"edges": "ok", "inner": "signal 11"}, (name, b)
    small = r["small"]
    assert small["mark"] is None and not small["first"] and not small["last"], small
    assert small["child"] == {"edges": "ok", "inner": "ok"}, small
    state = r["state"]
    assert state["small"] == 1 and state["rewritten"] == 3, state
    assert state["mark_min"] == 2 * os.sysconf("SC_PAGE_SIZE") and state["mark_bound"] > 0, state


# Marks made before the repair finds libibverbs: the program's own buffer on
# pages of its own (MAP_FIXED_NOREPLACE far from everything, as
# tests/test_doctor_lone_page.py places one), a block malloc mapped, a page of
# a thread's arena (through libibverbs), an io_uring ring (the kernel's memory).
FOREIGN = """
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.malloc.restype = ctypes.c_void_p
    page = mmap.PAGESIZE
    own = libc.mmap(1 << 44, 1 << 20, 3, 0x22 | 0x100000, -1, 0)
    assert own == 1 << 44, "no room at 16 TiB"
    ctypes.memset(own, 1, 1 << 20)
    assert libc.madvise(own, 1 << 20, 10) == 0
    # A block malloc mapped: its chunk header (prev_size, then the size with
    # IS_MMAPPED) opens the mapping, 16 bytes before what malloc returns.
    user = libc.malloc(1 << 20)
    prev_size, size = (ctypes.c_size_t * 2).from_address(user - 16)
    assert prev_size == 0 and size & 2, (prev_size, size)
    block = user - 16
    block_end = block + -(-(size & ~7) // page) * page
    assert libc.madvise(block, block_end - block, 10) == 0
    # A buffer bordering anonymous memory below it, and an inaccessible page
    # above (so that no other mark here can meet it and merge).
    pair = libc.mmap(None, 3 << 20, 3, 0x22, -1, 0)
    ctypes.memset(pair, 1, 2 << 20)
    bordered = pair + (1 << 20)
    assert libc.madvise(bordered, 1 << 20, 10) == 0
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(pair + (2 << 20), 1 << 20, 0) == 0
    params = (ctypes.c_uint32 * 30)()
    ring_fd = libc.syscall(425, 4, params)
    ring = None
    if ring_fd >= 0:
        ring_map = mmap.mmap(ring_fd, page, offset=0)
        ring = ctypes.addressof(ctypes.c_char.from_buffer(ring_map))
        assert libc.madvise(ring, page, 10) == 0
    h = plant("verbs")
    marks = {"own": own, "malloc": block, "arena": h.start, "bordered": bordered}
    # Inside those two: their pages past the first and before the last.
    inner = {"malloc": block + (512 << 10), "bordered": bordered + (512 << 10),
             "malloc_last": block_end - page, "bordered_last": bordered + (1 << 20) - page}
    if ring is not None:
        marks["kernel"] = ring
    before = {k: is_dontfork(a) for k, a in marks.items()}
    HOLD
    forkrepair.start_without_asking()
    pid = os.fork()
    if pid == 0:
        child_work(); os._exit(0)
    report = {"before": before, "after": {k: is_dontfork(a) for k, a in marks.items()},
              "inner": {k: is_dontfork(a) for k, a in inner.items()},
              "vouched": [forkrepair.vouches(block + page, block_end - page),
                          forkrepair.vouches(bordered + page, bordered + (1 << 20) - page)],
              "fork": outcome(os.waitpid(pid, 0)[1]), "ring": ring_fd,
              "state": forkrepair.repair_state()._asdict()}
"""


def test_the_sweep_takes_off_only_the_marks_a_child_trips_on() -> None:
    """Marked before libibverbs was found: the program's own buffer on pages of
    its own and the kernel's io_uring ring keep their marks; a thread arena's
    page is un-marked; a block malloc mapped (its header under the mark) and a
    buffer bordering other anonymous memory lose the mark on their first and
    last page only (all a rounded mark can take from anyone else there), and
    what stays is the repair's own; a fork child running Python lives."""
    r = run(FOREIGN.replace("HOLD", ""))
    assert all(r["before"].values()), r
    expected = {"own": True, "malloc": False, "arena": False, "bordered": False}
    if "kernel" in r["after"]:
        expected["kernel"] = True
    assert r["after"] == expected, r
    assert r["inner"] == {"malloc": True, "bordered": True, "malloc_last": False,
                          "bordered_last": False}, r
    assert r["vouched"] == [True, True], r
    assert r["fork"] == "ok", r
    assert r["state"]["unmarked"] == 3, r


def test_the_doctor_says_which_mark_is_which() -> None:
    """doctor --pid of the process above, before its repair starts: the
    program's own buffer is 'anon' (no risk), the block malloc mapped is
    'malloc-block' and the arena page 'arena' (hazards), the ring is the
    kernel's ('device', no risk)."""
    marks, report, _ = doctor_on_holder(textwrap.dedent(FOREIGN).replace(
        "HOLD", "print(json.dumps({k: hex(a) for k, a in marks.items()}), flush=True)\n"
        "sys.stdin.read()\nraise SystemExit(0)"))
    found = {f["start"]: (f["kind"], f["risk"]) for f in report["findings"]}

    def at(address: str) -> tuple[str, str] | None:
        value = int(address, 16)
        for f in report["findings"]:
            if int(f["start"], 16) <= value < int(f["end"], 16):
                return f["kind"], f["risk"]
        return None

    assert at(marks["own"]) == ("anon", "none"), found
    assert at(marks["bordered"]) == ("anon-adjacent", "medium"), found
    assert at(marks["malloc"]) == ("malloc-block", "high"), found
    assert at(marks["arena"]) == ("arena", "high"), found
    if "kernel" in marks:
        assert at(marks["kernel"]) == ("device", "none"), found


def test_the_kernels_own_mappings_are_its_own() -> None:
    """The one rule for memory the kernel or a driver marked for itself
    (rs_driver_mapping, the doctor's and the sweep's): kernel pseudo-mappings
    whatever the version calls them; a program's own memory is not."""
    for path in (b"anon_inode:[perf_event]", b"anon_inode:[io_uring]", b"[vvar]", b"[vdso]",
                 b"[vvar_vclock]", b"[uprobes]", b"anon_inode:i915.gem"):
        assert lib.rs_driver_mapping(path, 0) == 1, path
    for path in (b"", b"[heap]", b"[stack]", b"[stack:123]", b"[anon:torch pinned]",
                 b"[anon_shmem:pool]", b"/memfd:buf (deleted)", b"/dev/shm/x"):
        assert lib.rs_driver_mapping(path, 0) == 0, path


def test_marks_stay_bounded_through_registrations() -> None:
    """10,000 register/deregister cycles of small and large malloc'd buffers
    leave the number of mappings where it was; 6,000 registrations held at
    once add at most two mappings per mark alive, and no more marks than
    the bound (the rest are left unmarked and counted)."""
    r = run(STARTED + textwrap.dedent("""
        def maps():
            with open("/proc/self/maps", "rb") as f:
                return f.read().count(b"\\n")
        bufs = [(libc.malloc(n), n) for n in (4096, 65536, 8 << 20) for _ in range(4)]
        start = maps(); seen = []
        for cycle in range(10000 // len(bufs)):
            for p, n in bufs:
                assert verbs.ibv_dontfork_range(p, n) == 0
            for p, n in bufs:
                assert verbs.ibv_dofork_range(p, n) == 0
            if cycle % 100 == 0:
                seen.append(maps())
        cycled = maps()
        held = [(libc.malloc(40000), 40000) for _ in range(6000)]
        for p, n in held:
            assert verbs.ibv_dontfork_range(p, n) == 0
        state = forkrepair.repair_state()
        report = {"start": start, "cycled": cycled, "most": max(seen), "held": maps(),
                  "state": state._asdict()}
        for p, n in held:
            verbs.ibv_dofork_range(p, n)
        report["released"] = maps()
    """), timeout=300)
    state = r["state"]
    assert r["cycled"] == r["start"] and r["most"] <= r["start"] + 2, r
    assert state["bounded"] == 6000 - state["mark_bound"], r
    assert r["held"] - r["cycled"] <= 2 * state["mark_bound"] + 64, r
    assert r["released"] <= r["cycled"] + 64, r


def test_the_guard_does_not_count_the_repairs_marks() -> None:
    """guard("raise") in a repaired process: forks go ahead beside the repair's
    own marks (a registration's inner pages), the second without reading smaps
    again (remembered, as device memory is), and a mark a child trips on that
    the repair did not make is still refused."""
    r = run("""
        import rdmaspawn
        from rdmaspawn.tools.guard import ForkHazardError
        verbs = ctypes.CDLL("libibverbs.so.1")
        verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        assert verbs.ibv_fork_init() == 0
        forkrepair.start_without_asking()
        libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        block = libc.malloc(1 << 20)
        assert verbs.ibv_dontfork_range(block, 1 << 20) == 0
        rdmaspawn.guard("raise")
        import rdmaspawn.tools.forklook as forklook
        reads = []
        real = forklook.read_proc
        def counting(pid, name):
            reads.append(1); return real(pid, name)
        forklook.read_proc = counting
        results = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                child_work(); os._exit(0)
            results.append(outcome(os.waitpid(pid, 0)[1]))
        marked = is_dontfork(block + (512 << 10))
        looks = len(reads)
        page = os.sysconf("SC_PAGE_SIZE")
        small = libc.malloc(3 * page)
        start = (small + page - 1) // page * page
        assert libc.madvise(start, page, 10) == 0  # a heap page, marked by no one the repair knows
        try:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            refused = False
        except ForkHazardError:
            refused = True
        report = {"results": results, "marked": marked, "reads": looks, "refused": refused}
    """)
    assert r["results"] == ["ok", "ok"] and r["marked"] is True, r
    assert r["reads"] == 1, r
    assert r["refused"] is True, r


def test_a_preexec_fn_that_needs_fork_runs_beside_the_repairs_marks() -> None:
    """patch()'s fork_exec refuses a preexec_fn that needs fork() where a child
    would trip on marked memory; the repair's own marks are not such memory
    (the rxe lane's UCX ranks under `rdmaspawn run` were refused before), and
    another mark is still refused."""
    r = run(STARTED + textwrap.dedent("""
        import subprocess, rdmaspawn
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        block = libc.malloc(1 << 20)
        assert verbs.ibv_dontfork_range(block, 1 << 20) == 0
        rdmaspawn.patch()
        marked = is_dontfork(block + (512 << 10))
        first = subprocess.run(["true"], preexec_fn=lambda: None).returncode
        page = os.sysconf("SC_PAGE_SIZE")
        small = libc.malloc(3 * page)
        assert libc.madvise((small + page - 1) // page * page, page, 10) == 0
        try:
            subprocess.run(["true"], preexec_fn=lambda: None)
            second = "ran"
        except rdmaspawn.PreexecFnError:
            second = "refused"
        report = {"marked": marked, "first": first, "second": second}
    """))
    assert r == {"marked": True, "first": 0, "second": "refused"}, r
