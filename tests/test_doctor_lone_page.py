"""doctor on a MADV_DONTFORK page that has a mapping of its own: the safe case.

A page-aligned, page-padded registered buffer shares its pages with nothing,
so fork() works (measured on a real registration in
tests/realdevice/test_rxe.py); the doctor says OK for it, and HAZARD as soon as
the marked page borders other anonymous memory (guard pages, PROT_NONE, hold
nothing and do not count).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

HOLDER = r"""
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page = mmap.PAGESIZE
base = libc.mmap(None, 3 * page, mmap.PROT_READ | mmap.PROT_WRITE,
                 mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
if sys.argv[1] == "lone":
    libc.munmap(base, page)
    libc.munmap(base + 2 * page, page)
elif sys.argv[1] == "guarded":
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mprotect(base, page, 0)
    libc.mprotect(base + 2 * page, page, 0)
else:
    ctypes.memset(base, 1, page)
ctypes.memset(base + page, 1, page)
assert libc.madvise(base + page, page, 10) == 0  # MADV_DONTFORK
print(hex(base + page), flush=True)
sys.stdin.read()
"""


def _doctor_on(layout: str) -> tuple[dict, int, str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, layout],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = holder.stdout.readline().strip()
        res = subprocess.run([sys.executable, "-m", "rdmaspawn", "doctor", "--pid",
                              str(holder.pid), "--json"], stdout=subprocess.PIPE, text=True)
        return json.loads(res.stdout), res.returncode, address
    finally:
        holder.stdin.close()
        holder.wait()


@pytest.mark.parametrize("layout, kind, verdict", [
    ("lone", "anon", "OK"),
    ("guarded", "anon", "OK"),
    ("bordered", "anon-adjacent", "HAZARD"),
])
def test_marked_page_verdict(layout, kind, verdict):
    """A marked page with unmapped neighbours, or inaccessible guard pages, is OK;
    bordered by anonymous memory, HAZARD."""
    report, rc, address = _doctor_on(layout)
    mine = [f for f in report["findings"] if f["start"] == address]
    assert len(mine) == 1, report["findings"]
    assert mine[0]["kind"] == kind
    assert report["verdict"] == verdict
    assert rc == (0 if verdict == "OK" else 1)
