"""The fork repair against what happens beside it: a libibverbs being loaded
while other threads fork, a look under way in one thread when another forks,
two copies of the C core in one process.

Each case ran on the repair before these fixes and failed there (the
closing note of issue 47 gives the counts): a SIGSEGV inside dlopen() (the
repair rewrote a libibverbs the loader had mapped but not yet relocated,
and made its RELRO read-only early), a fork child that hung at its own next
fork (its copy of the look's lock named a thread it does not have), and a
registration that spun for ever (two copies of the core, each the other's
"next" madvise). Started without the kernel's word (``start_without_asking``):
no page is registered, so nothing is pinned and the outcome is the same on
any kernel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.hazard import require_verbs
from helpers.repair import run

CSRC = Path(__file__).resolve().parent.parent / "csrc"
RACE = Path(__file__).resolve().parent / "c" / "repair_race.c"
RACE_SOURCES = ["forkrepair.c", "unmark.c", "mapwalk.c", "exactmarks.c", "gotslot.c", "marker.c"]


@pytest.fixture(scope="module", autouse=True)
def _verbs() -> None:
    require_verbs()


def test_libibverbs_loaded_while_other_threads_fork(tmp_path) -> None:
    """One thread loads 200 copies of libibverbs, each its own object (dlopen
    through ctypes, which lets go of the GIL), while two threads fork: the
    process lives, every child exits 0, and each copy is found once relocated."""
    import ctypes

    ctypes.CDLL("libibverbs.so.1")  # to read the file the loader resolved
    with open(f"/proc/{os.getpid()}/maps") as maps:
        path = next(line.split()[-1] for line in maps if "libibverbs" in line)
    copies = []
    for i in range(200):
        copy = tmp_path / f"libibverbs-copy{i}.so.1"
        shutil.copy(path, copy)
        copies.append(str(copy))
    r = run(f"""
        forkrepair.start_without_asking()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.dlopen.restype = ctypes.c_void_p
        libc.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
        stop = threading.Event(); results = []; loads = [0]
        def load():
            for path in {copies!r}:
                assert libc.dlopen(path.encode(), 2), "dlopen failed"  # RTLD_NOW
                loads[0] += 1
            stop.set()
        def forks():
            while not stop.is_set():
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                results.append(outcome(os.waitpid(pid, 0)[1]))
        threads = [threading.Thread(target=load)] + [threading.Thread(target=forks) for _ in range(2)]
        for t in threads: t.start()
        for t in threads: t.join()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        report = {{"loads": loads[0], "forks": len(results),
                  "bad": [x for x in results if x != "ok"],
                  "repair": forkrepair.repair_state()._asdict()}}
    """, timeout=600)
    assert r["loads"] == 200 and r["forks"] > 0 and r["bad"] == [], r
    assert r["repair"]["libraries"] == 200, r


def test_a_look_under_way_in_another_thread_does_not_hang_a_fork_child(tmp_path) -> None:
    """Three threads start the repair again and again (each start looks,
    holding the look's lock) while the main thread forks 500 children, each of
    which forks a grandchild: no child hangs at its own fork. In C
    (tests/c/repair_race.c): a Python thread's loop takes the GIL between
    starts, and a fork holds the GIL, so from Python the window is all but
    closed; the repair before this fix hung 25 of 500 children here."""
    exe = _build_race(tmp_path)
    r = subprocess.run([str(exe), "look", "500"], capture_output=True, text=True, timeout=600)
    assert (r.returncode, r.stdout) == (0, "hung 0 of 500\n"), (r.returncode, r.stdout, r.stderr)


def test_two_copies_of_the_core_never_call_each_other_in_a_circle(tmp_path) -> None:
    """A second copy of the C core (the same file under another path: its own
    statics, as a vendored copy has) starts its repair after the first; after
    forks, libibverbs' registrations still return (no two hooks chained into
    each other), and the marks are the exact ones."""
    import rdmaspawn._rdmaspawn_cffi as core

    copy = tmp_path / os.path.basename(core.__file__)
    shutil.copy(core.__file__, copy)
    r = run(f"""
        import importlib.util
        from rdmaspawn._rdmaspawn_cffi import lib as first
        spec = importlib.util.spec_from_file_location("_rdmaspawn_cffi", {str(copy)!r})
        second = importlib.util.module_from_spec(spec); spec.loader.exec_module(second)
        verbs = ctypes.CDLL("libibverbs.so.1")
        verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        verbs.ibv_dofork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        assert verbs.ibv_fork_init() == 0
        libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p
        rcs = []; marked = []
        for lib in (first, second.lib, first, second.lib):
            lib.rs_repair_start()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            buf = libc.malloc(1 << 20)
            rcs.append(verbs.ibv_dontfork_range(buf, 1 << 20))
            marked.append([is_dontfork(buf), is_dontfork(buf + (512 << 10))])
            rcs.append(verbs.ibv_dofork_range(buf, 1 << 20))
        report = {{"rcs": rcs, "marked": marked}}
    """, timeout=120)
    assert r["rcs"] == [0] * 8, r
    # The buffer's first page (malloc's header) unmarked, an inner page marked.
    assert r["marked"] == [[False, True]] * 4, r


def _build_race(tmp_path: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if os.environ.get("RDMASPAWN_REQUIRE_TOOLS") == "1":
            pytest.fail("a C compiler is missing but RDMASPAWN_REQUIRE_TOOLS=1", pytrace=False)
        pytest.skip("a C compiler is missing")
    exe = tmp_path / "repair_race"
    cmd = [cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{CSRC}", str(RACE),
           *(str(CSRC / name) for name in RACE_SOURCES), "-ldl", "-lpthread", "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0 and not res.stderr, res.stderr
    return exe
