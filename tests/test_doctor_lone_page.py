"""The doctor and the guard on the same marked memory: one rule, one answer.

A page-aligned, page-padded registered buffer shares its pages with nothing,
so fork() works (measured on a real registration in
tests/realdevice/test_rxe.py); the doctor says OK for it and the guard lets
the fork go, and both say HAZARD (the guard refuses) as soon as the marked
page borders other anonymous memory (guard pages, PROT_NONE, hold nothing and
do not count). The rule lives in rdmaspawn/_host/forkrisk.py.

A 64 MiB-aligned block is what glibc's thread heaps look like, but only a
heap_info header glibc wrote makes one (issue 28: a UCX pool was once called
"heap_info header and malloc_state"): a marked, aligned block of zeros is a
buffer of its own to both.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

HOLDER = r"""
import ctypes, json, mmap, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
RW = mmap.PROT_READ | mmap.PROT_WRITE
ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
page = mmap.PAGESIZE
layout, action = sys.argv[1], sys.argv[2]
size = page
if layout == "aligned":
    # 64 MiB at a 64 MiB boundary, in a PROT_NONE reservation: a thread
    # heap's layout, but zeros where glibc's header would be.
    size = 64 << 20
    area = libc.mmap(None, 3 * size, 0, ANON, -1, 0)
    start = (area + size) & ~(size - 1)
    assert libc.mprotect(start, size, RW) == 0
elif layout == "lone":
    # A page far below where mmap() places anything (MAP_FIXED_NOREPLACE at
    # 16 TiB): a page between two holes would have later small mappings (an
    # import, the guard's first fork; seen on CPython 3.15) fill a hole.
    hint = 1 << 44
    start = libc.mmap(hint, page, RW, ANON | 0x100000, -1, 0)
    if start != hint:  # no room there (a smaller address space): a page between holes
        if start not in (None, (1 << 64) - 1):
            libc.munmap(start, page)
        base = libc.mmap(None, 3 * page, RW, ANON, -1, 0)
        start = base + page
        libc.munmap(base, page)
        libc.munmap(base + 2 * page, page)
    ctypes.memset(start, 1, page)
else:
    base = libc.mmap(None, 3 * page, RW, ANON, -1, 0)
    start = base + page
    if layout == "guarded":
        libc.mprotect(base, page, 0)
        libc.mprotect(base + 2 * page, page, 0)
    else:
        ctypes.memset(base, 1, page)
    ctypes.memset(start, 1, page)
assert libc.madvise(start, size, 10) == 0  # MADV_DONTFORK
if action == "hold":
    print(hex(start), flush=True)
    sys.stdin.read()
    sys.exit(0)
from rdmaspawn.tools.guard import ForkHazardError, guard
guard("raise")
out = {}
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    out["os.fork"] = "forked" if os.waitpid(pid, 0)[1] == 0 else "child died"
except ForkHazardError:
    out["os.fork"] = "refused"
try:  # preexec_fn: CPython's fork_exec forks on every version
    subprocess.run(["true"], preexec_fn=lambda: None, check=True)
    out["fork_exec"] = "forked"
except ForkHazardError:
    out["fork_exec"] = "refused"
import rdmaspawn
rdmaspawn.unguard()
rdmaspawn.patch()  # the engine's own refusal of a preexec_fn that needs fork
try:
    subprocess.run(["true"], preexec_fn=lambda: None, check=True)
    out["patched preexec_fn"] = "forked"
except rdmaspawn.PreexecFnError:
    out["patched preexec_fn"] = "refused"
print(json.dumps(out))
"""

CASES = [
    ("lone", "anon", "OK"),
    ("guarded", "anon", "OK"),
    ("aligned", "anon", "OK"),
    ("bordered", "anon-adjacent", "HAZARD"),
]


def _doctor_on(layout: str) -> tuple[dict, int, str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, layout, "hold"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = holder.stdout.readline().strip()
        res = subprocess.run([sys.executable, "-m", "rdmaspawn", "doctor", "--pid",
                              str(holder.pid), "--json"], stdout=subprocess.PIPE, text=True)
        return json.loads(res.stdout), res.returncode, address
    finally:
        holder.stdin.close()
        holder.wait()


@pytest.mark.parametrize("layout, kind, verdict", CASES)
def test_marked_page_verdict(layout: str, kind: str, verdict: str) -> None:
    """A marked page with unmapped neighbours, or inaccessible guard pages, or a
    64 MiB-aligned block that is no heap, is OK; bordered by anonymous memory, HAZARD."""
    report, rc, address = _doctor_on(layout)
    mine = [f for f in report["findings"] if f["start"] == address]
    assert len(mine) == 1, report["findings"]
    assert mine[0]["kind"] == kind
    assert "heap_info" not in mine[0]["note"]
    assert report["verdict"] == verdict
    assert rc == (0 if verdict == "OK" else 1)


@pytest.mark.parametrize("layout, kind, verdict", CASES)
def test_guard_gives_the_doctors_answer(layout: str, kind: str, verdict: str) -> None:
    """guard("raise") refuses os.fork() and a forking fork_exec exactly where the
    doctor says HAZARD, and lets both fork (the child lives) where it says OK; so
    does patch()'s fork_exec with a preexec_fn that needs fork (PreexecFnError)."""
    del kind
    res = subprocess.run([sys.executable, "-c", HOLDER, layout, "fork"],
                         stdout=subprocess.PIPE, text=True, timeout=120, check=True)
    expected = "refused" if verdict == "HAZARD" else "forked"
    assert json.loads(res.stdout) == {"os.fork": expected, "fork_exec": expected,
                                      "patched preexec_fn": expected}
