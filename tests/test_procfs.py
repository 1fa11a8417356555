"""rdmaspawn._host.procfs, .processinfo and .glibcheap: parsing /proc/PID/smaps, the
fast DONTFORK check, glibc's thread heaps and the process facts, on real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers.child import python_argv
from helpers.hazard import DROP_CAPS, Holder, mappable_device, shm_file, verbs_available

from rdmaspawn._host import glibcheap, processinfo, procfs

# Maps `n` one-page regions with alternating protection (so they stay separate
# mappings), marks page `dc` of them MADV_DONTFORK with a real madvise(), maps
# a file whose name contains " dc ", and prints what it did.
_PLANT = textwrap.dedent("""
    import ctypes, json, mmap, os, sys, tempfile, time
    from helpers.libc import MADV_DONTFORK, libc
    n, dc = %(n)d, %(dc)d
    page = mmap.PAGESIZE
    base = libc.mmap(None, 2 * n * page, 3, 0x22, -1, 0)
    for i in range(n):
        libc.mprotect(base + 2 * i * page, page, 1)
    d = tempfile.mkdtemp()
    path = os.path.join(d, "a dc b")
    with open(path, "wb") as f:
        f.write(b"x" * page)
    fd = os.open(path, os.O_RDONLY)
    keep = mmap.mmap(fd, page, prot=mmap.PROT_READ)
    target = base + 2 * dc * page + page if dc >= 0 else 0
    if dc >= 0:
        assert libc.madvise(target, page, MADV_DONTFORK) == 0, ctypes.get_errno()
    print(json.dumps({"pid": os.getpid(), "target": target, "page": page}), flush=True)
    sys.stdin.readline()
""")


class Child:
    def __init__(self, n: int = 10, dc: int = -1) -> None:
        self.proc = subprocess.Popen(
            python_argv(_PLANT % {"n": n, "dc": dc}),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.info = json.loads(self.proc.stdout.readline())
        self.pid: int = self.info["pid"]

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.communicate("\n", timeout=30)


def test_all_mappings_of_self_are_sane() -> None:
    """Every entry parses; [stack] and the interpreter are there; ranges are ordered."""
    maps = procfs.all_mappings()
    assert maps
    assert any(m.path == "[stack]" for m in maps)
    assert all(m.start < m.end and len(m.perms) == 4 and m.vmflags for m in maps)
    assert [m.start for m in maps] == sorted(m.start for m in maps)


def test_clean_process_has_no_dontfork() -> None:
    """A process that never called madvise(MADV_DONTFORK) shows none -- even with ' dc ' in a file name."""
    with Child(n=10, dc=-1) as c:
        assert procfs.has_dontfork(c.pid) is False
        assert procfs.dontfork_mappings(c.pid) == []
        assert any(m.path.endswith("a dc b") for m in procfs.all_mappings(c.pid))


def test_madvise_dontfork_is_found_exactly() -> None:
    """The page marked with a real madvise(MADV_DONTFORK) is reported, with the dc flag, and nothing else."""
    with Child(n=10, dc=3) as c:
        assert procfs.has_dontfork(c.pid) is True
        found = procfs.dontfork_mappings(c.pid)
        assert [(m.start, m.end) for m in found] == [(c.info["target"], c.info["target"] + c.info["page"])]
        m = found[0]
        assert m.dontfork and "dc" in m.vmflags and m.anonymous and not m.device
        assert m.perms == "rw-p"


def test_no_such_process() -> None:
    """A pid that does not exist raises NoSuchProcessError, both a ProcessLookupError and a FileNotFoundError."""
    p = subprocess.Popen(["true"])
    p.wait()
    for fn in (procfs.has_dontfork, procfs.dontfork_mappings, procfs.all_mappings):
        with pytest.raises(ProcessLookupError):
            fn(p.pid)
        with pytest.raises(FileNotFoundError):
            fn(p.pid)


def test_bad_pid_values() -> None:
    """Nonsense pids are refused before touching /proc."""
    with pytest.raises(ValueError):
        procfs.has_dontfork(0)
    with pytest.raises(ValueError):
        procfs.has_dontfork("../1")
    with pytest.raises(TypeError):
        procfs.has_dontfork(True)


def test_device_path_rule() -> None:
    """is_device_path: driver files count as devices; memory that lives under /dev does not."""
    assert procfs.is_device_path("/dev/infiniband/uverbs0")
    assert procfs.is_device_path("/dev/nvidia0")
    assert not procfs.is_device_path("/dev/shm/psm_1")
    assert not procfs.is_device_path("/dev/hugepages/rtemap_0")
    assert not procfs.is_device_path("/dev/hugepages1G/rtemap_0")  # issue 27: other names
    assert not procfs.is_device_path("/dev/hugepages2M/rtemap_0")
    assert procfs.is_device_path("/dev/tty")                  # a character device, there
    assert not procfs.is_device_path("/dev/null")             # major 1: memory devices
    assert procfs.is_device_path("", io_or_pfnmap=True)       # VM_IO / VM_PFNMAP
    assert not procfs.is_device_path("/dev/zero (deleted)")
    assert not procfs.is_device_path("")


def test_shm_mapping_counts_whatever_devices_says() -> None:
    """A DONTFORK page of /dev/shm is memory: found with devices=False and devices=True."""
    path = shm_file("rdmaspawn-procfs")
    try:
        with Holder(files=[path]) as h:
            start = h.info["marked"][path]
            for devices in (False, True):
                assert procfs.has_dontfork(h.pid, devices=devices) is True
                found = procfs.dontfork_mappings(h.pid, devices=devices)
                assert [m.start for m in found] == [start]
                assert not found[0].device
    finally:
        os.unlink(path)


def test_device_mappings_are_left_out_only_when_asked() -> None:
    """A real device mapping marked DONTFORK: has_dontfork() and dontfork_mappings() leave it
    out with devices=False and report it with devices=True."""
    device = mappable_device()
    if device is None:
        pytest.skip("no block device under /dev that this user may map (root usually can)")
    with Holder(files=[device]) as h:
        start = h.info["marked"][device]
        assert procfs.has_dontfork(h.pid, devices=False) is False
        assert procfs.has_dontfork(h.pid, devices=True) is True
        assert procfs.dontfork_mappings(h.pid, devices=False) == []
        found = procfs.dontfork_mappings(h.pid, devices=True)
        assert [(m.start, m.path, m.device) for m in found] == [(start, device, True)]


def test_is_dontfork_and_mapping_at() -> None:
    """is_dontfork(addr) is true on the marked page only; an unmapped address has no mapping."""
    with Child(n=10, dc=3) as c:
        target, page = c.info["target"], c.info["page"]
        assert procfs.is_dontfork(target, c.pid)
        assert procfs.is_dontfork(target + page - 1, c.pid)
        assert not procfs.is_dontfork(target - 2 * page, c.pid)
        m = procfs.mapping_at(target, c.pid)
        assert m is not None and (m.start, m.end) == (target, target + page)
        assert procfs.mapping_at(4096, c.pid) is None
        assert not procfs.is_dontfork(4096, c.pid)


def test_library_paths_name_the_real_files() -> None:
    """library_paths() finds the file a soname resolved to, as mapped; absent libraries are left out."""
    with Holder(plant="verbs" if verbs_available() else None) as h:
        found = procfs.library_paths(["libc.so", "libibverbs.so", "libnothing-here.so"], h.pid)
        maps = procfs.read_proc(h.pid, "maps").decode()
        assert os.path.basename(found["libc.so"]).startswith("libc.so")
        assert found["libc.so"] in maps and os.path.realpath(found["libc.so"]) == found["libc.so"]
        assert "libnothing-here.so" not in found
        if h.info["hazard"] is not None:
            assert found["libibverbs.so"] == h.info["hazard"]["library"]
            assert os.path.basename(found["libibverbs.so"]).startswith("libibverbs.so.1.")
        assert procfs.library_path("libnothing-here.so", h.pid) is None


_THREAD_HEAP = textwrap.dedent("""
    import ctypes, json, mmap, sys, threading
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    out = {}
    t = threading.Thread(target=lambda: out.update(thread=libc.malloc(16384)))
    t.start(); t.join()
    out["main"] = libc.malloc(64)  # the main arena: brk heap
    big = mmap.mmap(-1, 256 << 20)  # anonymous, larger than a heap, not a heap
    out["big"] = ctypes.addressof(ctypes.c_char.from_buffer(big))
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
""")


def test_thread_heap_base() -> None:
    """A thread's malloc() lies in a HEAP_MAX_SIZE-aligned glibc heap; brk memory and a
    large anonymous mapping that merely covers an aligned block are not heaps."""
    p = subprocess.Popen([sys.executable, "-c", _THREAD_HEAP], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        addrs = json.loads(p.stdout.readline())
        maps = procfs.all_mappings(p.pid)
        size = glibcheap.HEAP_MAX_SIZE
        assert size == 64 << 20  # 64-bit glibc
        assert glibcheap.thread_heap_base(addrs["thread"], maps) == addrs["thread"] & ~(size - 1)
        assert glibcheap.thread_heap_base(addrs["main"], maps) is None
        big_inner = (addrs["big"] + size) & ~(size - 1)  # an aligned block inside the array
        assert glibcheap.thread_heap_base(big_inner, maps) is None
        assert glibcheap.thread_heap_base(addrs["thread"], procfs.parse_maps(
            procfs.read_proc(p.pid, "maps"))) == addrs["thread"] & ~(size - 1)
    finally:
        p.communicate("\n", timeout=30)


def test_has_capability_reads_cap_eff() -> None:
    """has_capability() reads the effective set: a child that clears CAP_SYS_PTRACE shows it gone."""
    code = textwrap.dedent(DROP_CAPS) + textwrap.dedent("""
        from rdmaspawn._host import processinfo
        before = processinfo.has_capability(processinfo.CAP_SYS_PTRACE)
        drop_capabilities()
        print(before, processinfo.has_capability(processinfo.CAP_SYS_PTRACE))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.split()
    assert after == "False"
    assert before == ("True" if os.geteuid() == 0 else before)


def test_one_dontfork_among_1000_mappings() -> None:
    """has_dontfork() and dontfork_mappings() find the one marked mapping among over 1000
    (their speed is the benchmark's business, not a pass/fail test's)."""
    with Child(n=1000, dc=500) as c:
        assert len(procfs.all_mappings(c.pid)) > 1000
        assert procfs.has_dontfork(c.pid)
        found = procfs.dontfork_mappings(c.pid)
        assert [m.start for m in found] == [c.info["target"]]


_THREADS = textwrap.dedent("""
    import sys, threading
    gate = threading.Event()
    threads = [threading.Thread(target=gate.wait) for _ in range(3)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.readline()
    gate.set()
""")


def test_environ_cmdline_threads_pids() -> None:
    """The small readers on a real child: the environment it started with, its argv, its
    thread count (main + 3), and its pid among all pids."""
    env = dict(os.environ, RDMASPAWN_PROCFS_TEST="a=b c")
    argv = [sys.executable, "-c", _THREADS, "x y", ""]
    p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        assert processinfo.read_environ(p.pid)["RDMASPAWN_PROCFS_TEST"] == "a=b c"
        assert processinfo.read_cmdline(p.pid)[1:] == argv[1:]  # the empty last one included
        assert processinfo.thread_count(p.pid) == 4
        assert p.pid in processinfo.all_pids() and os.getpid() in processinfo.all_pids()
        assert os.path.samefile(processinfo.exe_path(p.pid), sys.executable)
    finally:
        p.communicate("\n", timeout=30)
    with pytest.raises(ProcessLookupError):
        processinfo.read_environ(p.pid)
