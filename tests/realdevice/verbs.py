"""Real memory registrations on the soft-RoCE device, through libibverbs with ctypes.

ctypes rather than pyverbs: pyverbs registers only buffers it allocates
itself, while these tests register memory that already exists (a thread
arena's malloc block, a bytearray's buffer), and the same code has to load
every libibverbs release of the matrix (pyverbs builds against one).

Three registrations, each the start of a way a real program gets hurt or not:

- ``malloc``: 256 bytes malloc()ed by a fresh thread, so the block shares its
  page with the thread arena's header (glibc's fork handler writes the arena
  mutex in the child);
- ``bytearray``: a Python object's buffer, so Python's own objects share the
  page;
- ``page``: one page of its own, between two inaccessible guard pages:
  nothing else lives on it, the case where fork() works.

Everything here runs in a throwaway process: a registration is never undone.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading

IBV_ACCESS_LOCAL_WRITE = 1
PAGE = os.sysconf("SC_PAGESIZE")
KINDS = ("malloc", "bytearray", "page")


def have_device() -> bool:
    """Whether this machine has an RDMA device (a uverbs node and a sysfs entry)."""
    return os.path.exists("/dev/infiniband/uverbs0") and bool(
        os.listdir("/sys/class/infiniband") if os.path.isdir("/sys/class/infiniband") else [])


class VerbsError(OSError):
    """A libibverbs call failed (no device, a refused registration)."""


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL("libibverbs.so.1", use_errno=True)
    vp = ctypes.c_void_p
    lib.ibv_get_device_list.restype = ctypes.POINTER(vp)
    lib.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.ibv_get_device_name.restype = ctypes.c_char_p
    lib.ibv_get_device_name.argtypes = [vp]
    lib.ibv_open_device.restype = vp
    lib.ibv_open_device.argtypes = [vp]
    lib.ibv_alloc_pd.restype = vp
    lib.ibv_alloc_pd.argtypes = [vp]
    lib.ibv_reg_mr.restype = vp
    lib.ibv_reg_mr.argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_int]
    lib.ibv_create_cq.restype = vp
    lib.ibv_create_cq.argtypes = [vp, ctypes.c_int, vp, vp, ctypes.c_int]
    lib.ibv_fork_init.restype = ctypes.c_int
    lib.ibv_fork_init.argtypes = []
    return lib


class Device:
    """The first RDMA device, opened, with one protection domain."""

    def __init__(self) -> None:
        self.lib = _library()
        n = ctypes.c_int(0)
        devices = self.lib.ibv_get_device_list(ctypes.byref(n))
        if not devices or n.value < 1:
            raise VerbsError(ctypes.get_errno(), "no RDMA device (ibv_get_device_list)")
        self.name = self.lib.ibv_get_device_name(devices[0]).decode()
        self.context = self.lib.ibv_open_device(devices[0])
        if not self.context:
            raise VerbsError(ctypes.get_errno(), f"ibv_open_device({self.name}) failed")
        self.pd = self.lib.ibv_alloc_pd(self.context)
        if not self.pd:
            raise VerbsError(ctypes.get_errno(), "ibv_alloc_pd failed")
        # A completion queue, as every real user has: its ring is mapped from
        # the uverbs device (/dev/infiniband/uverbs0), which the doctor must
        # not count as a hazard.
        self.cq = self.lib.ibv_create_cq(self.context, 16, None, None, 0)
        if not self.cq:
            raise VerbsError(ctypes.get_errno(), "ibv_create_cq failed")
        self._keep: list[object] = []

    def fork_state(self) -> str:
        """What ``ibv_is_fork_initialized()`` answers; "absent" before rdma-core 35."""
        try:
            fn = self.lib.ibv_is_fork_initialized
        except AttributeError:
            return "absent"
        fn.restype = ctypes.c_int
        return {0: "disabled", 1: "enabled", 2: "unneeded"}.get(fn(), "?")

    def register(self, address: int, length: int) -> None:
        mr = self.lib.ibv_reg_mr(self.pd, address, length, IBV_ACCESS_LOCAL_WRITE)
        if not mr:
            e = ctypes.get_errno()
            raise VerbsError(e, f"ibv_reg_mr(0x{address:x}, {length}): {os.strerror(e)}")

    def register_kind(self, kind: str) -> int:
        """Make and register the buffer of ``kind`` (see the module); its address."""
        if kind == "malloc":
            address = thread_malloc(256)
            self.register(address, 256)
        elif kind == "bytearray":
            buf = bytearray(b"r" * 256)
            self._keep.append(buf)
            address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            self.register(address, len(buf))
        elif kind == "page":
            address = _lone_page()
            self.register(address, PAGE)
        else:
            raise ValueError(f"unknown registration kind {kind!r}")
        return address


def dc(address: int) -> bool:
    """Whether the page holding ``address`` lies in a ``dc`` mapping (smaps)."""
    lo = hi = 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
            elif head[0] == "VmFlags:" and lo <= address < hi:
                return "dc" in head[1:]
    raise LookupError(f"0x{address:x} is not mapped")


def thread_malloc(size: int) -> int:
    """malloc(size) in a fresh thread, served from that thread's arena; leaked."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(libc.malloc(size) or 0))
    t.start()
    t.join()
    if not out or not out[0]:
        raise MemoryError("malloc in a fresh thread failed")
    return out[0]


def _lone_page() -> int:
    """One page between two inaccessible guard pages (mapped PROT_NONE, the middle
    made writable): no later mapping can come to border it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    base = libc.mmap(None, 3 * PAGE, 0, flags, -1, 0)  # PROT_NONE
    if base in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    if libc.mprotect(base + PAGE, PAGE, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    ctypes.memset(base + PAGE, 0x72, PAGE)
    return base + PAGE
