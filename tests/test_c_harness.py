"""The C engine on its own: tests/c/engine_harness.c built straight from csrc/.

No Python between the test and rs_spawn(), so the engine can run where Python
cannot easily follow: with -Wall -Wextra -Werror, under AddressSanitizer and
UBSan, under valgrind, and cross-built for aarch64 under qemu-user.

valgrind and qemu-user run a CLONE_VM|CLONE_VFORK child as a plain fork (and
have no clone3). valgrind still makes the parent wait, and the engine's
MAP_SHARED report slot brings the child's errors back there; qemu-user does
not wait, so a pre-exec error comes back too late (glibc's own posix_spawn()
loses its errors the same way). The harness finds that out with a bare
clone() and reports those checks as "# TODO"; everything else (fds, stdio,
signals, threads, a second thread forking throughout, the engine under
memory pressure, fork_init, the memory checker) must pass. Every build has
RS_MEASURE_STACK: the harness measures how deep the child's stack goes.

Tools that are missing skip, except under RDMASPAWN_REQUIRE_TOOLS=1, where a
missing tool is a failure (Debian: valgrind, gcc-aarch64-linux-gnu,
libc6-dev-arm64-cross, qemu-user).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
SOURCES = [ROOT / "tests" / "c" / "engine_harness.c"] + [
    CSRC / name for name in ("spawn.c", "child.c", "report.c", "forkinit.c", "forkprobe.c",
                             "setup.c", "unmark.c", "mapwalk.c", "exactmarks.c", "gotslot.c", "forkrepair.c",
                             "marker.c")
]
CFLAGS = ["-std=gnu11", "-g", "-Wall", "-Wextra", "-Werror", "-DRS_MEASURE_STACK"]
AARCH64_SYSROOT = Path("/usr/aarch64-linux-gnu")
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) todo$", re.M)


def _require(path: str | None, what: str) -> str:
    """The tool's path; skip (fail under RDMASPAWN_REQUIRE_TOOLS=1) without it."""
    if path:
        return path
    if os.environ.get("RDMASPAWN_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{what} is missing but RDMASPAWN_REQUIRE_TOOLS=1", pytrace=False)
    pytest.skip(f"{what} is missing")


def _build(cc: str, out: Path, *flags: str) -> Path:
    cmd = [cc, *CFLAGS, *flags, f"-I{CSRC}", *map(str, SOURCES), "-ldl", "-lpthread",
           "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0 and not res.stderr, f"{' '.join(cmd)}\n{res.stderr}"
    return out


def _run(cmd: list[str], tmp_path: Path, env: dict | None = None, timeout: int = 120):
    """Run the harness; (stdout, stderr, todo lines) once it has passed.

    Output goes to files and the harness gets a session of its own, so that a
    child left hanging (see the qemu test) cannot hold a pipe open, and is
    killed with its group afterwards.
    """
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as fout, open(err, "wb") as ferr:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fout, stderr=ferr,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    stdout, stderr = out.read_text(), err.read_text(errors="replace")
    report = f"{' '.join(cmd)}: exit {rc}\n{stdout}\n{stderr}"
    summary = SUMMARY.search(stdout)
    assert summary, report
    assert rc == 0 and summary.group(2) == "0", report
    todo = [line for line in stdout.splitlines() if "# TODO" in line]
    assert len(todo) == int(summary.group(3)), report
    return stdout, stderr, todo


def _cc() -> str:
    return _require(os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc"),
                    "a C compiler (cc)")


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_native_build_passes(tmp_path, opt):
    """Warning-free at -O0 and -O2; every check passes and none is excused,
    the child's stack use included."""
    stdout, _, todo = _run([str(_build(_cc(), tmp_path / "harness", opt))], tmp_path)
    assert todo == [], stdout
    assert "# force_clone=1: clone\n" in stdout
    assert "the child uses at most half of its stack" in stdout


@pytest.mark.parametrize("fake_stacks", [1, 0])
def test_sanitizers(tmp_path, fake_stacks):
    """Clean under ASan+UBSan, with fake stacks on and off
    (detect_stack_use_after_return).

    The CLONE_VM child runs on the engine's own mmap'd stack (or a frame of
    the caller's) and ASan writes the shadow of its frames there; the child
    exec's instead of returning, so the engine unpoisons that stack after
    each spawn. With fake stacks the child borrows the suspended parent
    thread's, whose TLS it shares, and the frames it never frees are
    reclaimed or bypassed by ASan.
    """
    exe = _build(_cc(), tmp_path / "harness-asan", "-O1", "-fno-omit-frame-pointer",
                 "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined")
    stdout, stderr, todo = _run([str(exe)], tmp_path, env={
        "ASAN_OPTIONS": f"detect_stack_use_after_return={fake_stacks}:detect_leaks=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    })
    assert todo == [], stdout
    assert "the child uses at most half of its stack" in stdout
    for word in ("AddressSanitizer", "LeakSanitizer", "runtime error"):
        assert word not in stderr, stderr


def test_valgrind(tmp_path):
    """memcheck finds nothing; without clone3 the engine falls back to clone().

    valgrind runs CLONE_VM|CLONE_VFORK as a fork that still waits: every
    failure must come back (through the MAP_SHARED slot), so nothing is
    excused, while a second thread forks throughout and its children live
    to the end: no spawn may wait for them (a report pipe inherited by such
    a fork made spawns wait, forever here). valgrind's output stays empty,
    pre-exec children included.

    --run-libc-freeres=no: at a process's exit valgrind runs glibc's
    __libc_freeres() in it, which takes glibc's stdio list lock. A failed
    child is a fork copy here, taken while the forking thread may hold that
    lock (inside fork()), so it would wait on it forever: valgrind's doing,
    not a child of the engine's (which makes raw syscalls only).
    """
    valgrind = _require(shutil.which("valgrind"), "valgrind")
    exe = _build(_cc(), tmp_path / "harness", "-O1")
    stdout, stderr, todo = _run([valgrind, "-q", "--error-exitcode=99", "--leak-check=full",
                                 "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
                                 "--run-libc-freeres=no", str(exe)], tmp_path, timeout=300)
    assert not re.search(r"^==\d+==", stderr, re.M), stderr
    assert "DOES NOT share our memory" in stdout and "CLONE_VFORK waits" in stdout
    assert re.search(r"^# a second thread forked [1-9]\d* children", stdout, re.M), stdout
    assert todo == [], todo


def _aarch64_cc() -> str:
    return _require(shutil.which("aarch64-linux-gnu-gcc"),
                    "aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)")


@pytest.mark.parametrize("opt", ["-O0", "-O2", "-O3", "-O2 -mbranch-protection=standard"])
def test_aarch64_compiles_clean(tmp_path, opt):
    """csrc/ (the svc wrappers and the clone3 entry in arch/aarch64.h) cross-builds warning-free."""
    cc = _aarch64_cc()
    for src in SOURCES[1:]:
        cmd = [cc, *CFLAGS, *opt.split(), f"-I{CSRC}", "-c", str(src),
               "-o", str(tmp_path / (src.stem + ".o"))]
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0 and not res.stderr, f"{' '.join(cmd)}\n{res.stderr}"


def test_aarch64_under_qemu(tmp_path):
    """The aarch64 build passes under qemu-user.

    qemu-user (7.2) has no clone3 and no CLONE_PIDFD, and runs
    CLONE_VM|CLONE_VFORK as a fork that does not wait: the glibc clone()
    fallback is what runs, the clone3 entry is not exercised here, and the
    checks that need a pidfd or the child's report before it is done are
    excused. The harness's own children run through qemu too
    (RS_HARNESS_WRAP), so no binfmt_misc registration is needed. The threads
    check is left out: some children forked (as qemu does it) from a
    multi-threaded qemu process deadlock inside qemu, on futexes, forever.
    """
    cc = _aarch64_cc()
    qemu = _require(shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static"),
                    "qemu-aarch64 (qemu-user)")
    _require(str(AARCH64_SYSROOT) if (AARCH64_SYSROOT / "lib").is_dir() else None,
             f"the aarch64 glibc in {AARCH64_SYSROOT} (libc6-dev-arm64-cross)")
    exe = _build(cc, tmp_path / "harness-aarch64", "-O2")
    stdout, _, todo = _run([qemu, str(exe)], tmp_path, env={
        "QEMU_LD_PREFIX": str(AARCH64_SYSROOT), "RS_HARNESS_WRAP": qemu,
        "RS_HARNESS_NO_THREADS": "1",
    })
    assert "# force_clone=1: clone\n" in stdout
    assert all("no CLONE_PIDFD" in line or "does not wait" in line for line in todo), todo
