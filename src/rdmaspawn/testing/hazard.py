"""Plant the real MADV_DONTFORK hazard in the current process.

Once ``ibv_fork_init()`` has run, libibverbs marks every registered buffer
``MADV_DONTFORK``, rounded out to whole pages.  When such a page also holds
malloc's own bookkeeping, the child of a ``fork()`` finds that page missing:
glibc's fork handlers (``__malloc_fork_unlock_child``) walk every arena and
write its mutex, and the child dies with SIGSEGV before it can ``exec``.  A
child started with ``CLONE_VM`` (``posix_spawn``, ``vfork``, rdmaspawn) shares
the parent's memory and never notices.

:func:`plant` reproduces this without RDMA hardware, with ctypes only:

1. In a fresh thread, ``malloc()`` a buffer.  glibc serves a new thread from a
   thread arena: a heap aligned to ``HEAP_MAX_SIZE`` (64 MiB on 64-bit) whose
   first page holds the ``heap_info`` header and the arena (``malloc_state``,
   mutex first).  On a fresh arena the buffer starts on that same page.
2. Mark the buffer's pages ``MADV_DONTFORK`` -- through libibverbs
   (``ibv_fork_init()`` then ``ibv_dontfork_range()``, what ``ibv_reg_mr()``
   does) or with a direct ``madvise()``.  If the buffer does not share a page
   with the arena (a reused arena, or a small request served from the
   thread's tcache out of another arena), the arena's page is marked directly,
   so the hazard is planted every time rather than most of the time.
3. Check ``/proc/self/smaps``: the arena's page must carry the ``dc``
   ("do not copy on fork") flag, or :func:`plant` raises.

The hazard cannot be undone: planting leaks the buffer on purpose and the
process should not ``fork()`` afterwards.  Plant it only in a throwaway
process (the tests run it in a child interpreter).  Linux with glibc only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import os
import threading
import time

__all__ = ["VERBS_LIBRARY", "Hazard", "HazardError", "plant", "verbs_available"]

#: The soname the verbs method loads (the one the system ``libibverbs1`` has).
VERBS_LIBRARY = "libibverbs.so.1"

MADV_DONTFORK = 10

# glibc's HEAP_MAX_SIZE: 2 * DEFAULT_MMAP_THRESHOLD_MAX, i.e. 64 MiB on
# 64-bit and 1 MiB on 32-bit.  Thread heaps are mmap()ed aligned to it, so the
# heap_info header of the heap holding an address is that address rounded down.
_HEAP_MAX_SIZE = (64 if ctypes.sizeof(ctypes.c_void_p) == 8 else 1) * 1024 * 1024

# Above tcache's largest size (1032 bytes) so it cannot come back from a
# tcache holding another arena's chunk, and well below the mmap threshold
# (128 KiB at start) so it comes from the thread's arena.  A realistic size
# for a small registered buffer.
_BUFFER_SIZE = 16 * 1024

# ibv_is_fork_initialized() results.
_FORK_STATES = {0: "disabled", 1: "enabled", 2: "unneeded"}


class HazardError(RuntimeError):
    """The hazard could not be planted (no thread arena, no libibverbs, ...)."""


@dataclasses.dataclass(frozen=True)
class Hazard:
    """What :func:`plant` marked ``MADV_DONTFORK``."""

    #: ``"verbs"`` or ``"madvise"``.
    method: str
    #: Real path of the libibverbs that did it (``"verbs"``), else ``None``.
    library: str | None
    #: First address marked (page aligned).
    start: int
    #: Bytes marked (whole pages).
    length: int
    #: Address of the malloc arena (``malloc_state``) left unmapped in a fork child.
    arena: int
    #: The buffer malloc()ed in the fresh thread (leaked on purpose).
    buffer: int
    #: ``ibv_is_fork_initialized()`` before and after (``"verbs"``), else ``None``.
    fork_state_before: str | None = None
    fork_state_after: str | None = None


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.madvise.restype = ctypes.c_int
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _mappings() -> list[tuple[int, int, str]]:
    """(start, end, rest of line) for every mapping in /proc/self/maps."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, _, rest = line.partition(" ")
            lo, _, hi = span.partition("-")
            out.append((int(lo, 16), int(hi, 16), rest))
    return out


def _heap_header(addr: int, maps: list[tuple[int, int, str]]) -> int | None:
    """The heap_info address for ``addr`` if it lies in a thread heap, else None.

    Only reads memory that /proc/self/maps says is a readable mapping starting
    exactly at the aligned address (a thread heap), so a main-arena (brk)
    address never leads to a stray read.
    """
    base = addr & ~(_HEAP_MAX_SIZE - 1)
    for lo, _, rest in maps:
        if lo == base and rest.startswith("r"):
            return base
    return None


def _find_arena(buf: int, page: int) -> int:
    """The address of the malloc_state (arena) that owns ``buf``."""
    maps = _mappings()
    heap = _heap_header(buf, maps)
    if heap is None:
        raise HazardError(
            "the fresh thread's malloc() did not come from a thread arena "
            "(main arena reused: too many arenas, or not glibc malloc)"
        )
    # heap_info.ar_ptr is the first field.  In an arena's first heap the
    # malloc_state follows heap_info on the same page; in a later heap it
    # points back into the first one.
    ar_ptr = ctypes.c_void_p.from_address(heap).value or 0
    first = _heap_header(ar_ptr, maps) if ar_ptr else None
    if first is None or not (first < ar_ptr < first + page):
        raise HazardError(f"unexpected glibc heap layout at {heap:#x}")
    return ar_ptr


def _task_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _alloc_in_fresh_thread(libc: ctypes.CDLL) -> int:
    result = []

    def target() -> None:
        result.append(libc.malloc(_BUFFER_SIZE) or 0)

    tasks = _task_count()
    t = threading.Thread(target=target, name="rdmaspawn-hazard")
    t.start()
    t.join()
    # join() can return while the OS thread is still exiting (3.13), and
    # os.fork() on 3.12+ then warns that the process is multi-threaded.
    deadline = time.monotonic() + 2.0
    while _task_count() > tasks and time.monotonic() < deadline:
        time.sleep(0.001)
    if not result or not result[0]:
        raise HazardError("malloc() failed in the fresh thread")
    return result[0]


def _is_dontfork(addr: int) -> bool:
    """Whether /proc/self/smaps shows ``dc`` (MADV_DONTFORK) on ``addr``'s mapping."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, _, hi = head.partition("-")
                try:
                    inside = int(lo, 16) <= addr < int(hi, 16)
                except ValueError:
                    pass
            elif inside and head == "VmFlags:":
                return "dc" in line.split()[1:]
    return False


def _library_path(soname_prefix: str) -> str | None:
    for _, _, rest in _mappings():
        fields = rest.split(None, 4)  # perms offset dev inode path
        if len(fields) == 5 and os.path.basename(fields[4].strip()).startswith(
            soname_prefix
        ):
            return fields[4].strip()
    return None


def _load_verbs() -> ctypes.CDLL | None:
    try:
        verbs = ctypes.CDLL(VERBS_LIBRARY, use_errno=True)
    except OSError:
        return None
    verbs.ibv_fork_init.restype = ctypes.c_int
    verbs.ibv_fork_init.argtypes = []
    verbs.ibv_is_fork_initialized.restype = ctypes.c_int
    verbs.ibv_is_fork_initialized.argtypes = []
    verbs.ibv_dontfork_range.restype = ctypes.c_int
    verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return verbs


def _target_range(buf: int, arena: int, page: int) -> tuple[int, int]:
    """Pages to mark: the buffer's when it shares the arena's page, else the arena's."""
    buf_lo = buf & ~(page - 1)
    arena_lo = arena & ~(page - 1)
    if buf_lo == arena_lo:
        hi = (buf + _BUFFER_SIZE + page - 1) & ~(page - 1)
        return buf_lo, hi - buf_lo
    return arena_lo, page


def verbs_available() -> bool:
    """Whether ``libibverbs.so.1`` can be loaded here."""
    return _load_verbs() is not None


def plant(method: str = "auto") -> Hazard:
    """Plant the DONTFORK-over-malloc-arena hazard in this process; return what was marked.

    ``method``:

    - ``"verbs"``: the real libibverbs (``libibverbs.so.1``): ``ibv_fork_init()``
      then ``ibv_dontfork_range()``.  Raises :class:`HazardError` if the library
      is missing, if ``ibv_fork_init()`` fails (``EINVAL``: memory was registered
      before it), or if it reports fork support "unneeded" (a kernel with
      copy-on-fork for RDMA pages and ib_core loaded: libibverbs then marks
      nothing).
    - ``"madvise"``: ``madvise(MADV_DONTFORK)`` directly, no libibverbs.
    - ``"auto"``: ``"verbs"`` if libibverbs loads and can plant (fork support
      not "unneeded", ``ibv_fork_init()`` succeeds), else ``"madvise"``.

    Afterwards every ``fork()`` child of this process (``os.fork()``,
    ``subprocess`` where it forks, ``multiprocessing`` "fork") dies with SIGSEGV
    before running any code; ``CLONE_VM`` children (``os.posix_spawn``,
    rdmaspawn) are unaffected.  There is no undo.
    """
    if method not in ("auto", "verbs", "madvise"):
        raise ValueError(f"method must be 'auto', 'verbs' or 'madvise', not {method!r}")

    verbs = None
    if method in ("auto", "verbs"):
        verbs = _load_verbs()
        if verbs is None and method == "verbs":
            raise HazardError(f"cannot load {VERBS_LIBRARY}")
        if verbs is not None and verbs.ibv_is_fork_initialized() == 2:
            if method == "verbs":
                raise HazardError(
                    "ibv_is_fork_initialized() says fork support is unneeded "
                    "(kernel copy-on-fork): libibverbs will not mark DONTFORK"
                )
            verbs = None

    libc = _libc()
    page = os.sysconf("SC_PAGESIZE")

    before = None
    if verbs is not None:
        # ibv_fork_init() must come before any registration, so before the
        # buffer exists; like ibv_reg_mr(), ibv_dontfork_range() then marks it.
        before = _FORK_STATES.get(verbs.ibv_is_fork_initialized(), "unknown")
        rc = verbs.ibv_fork_init()
        if rc != 0 and method == "verbs":
            raise HazardError(f"ibv_fork_init() failed: {os.strerror(rc)}")
        if rc != 0:
            verbs = before = None  # "auto": fall back to madvise

    buf = _alloc_in_fresh_thread(libc)
    arena = _find_arena(buf, page)
    start, length = _target_range(buf, arena, page)

    if verbs is not None:
        rc = verbs.ibv_dontfork_range(start, length)
        if rc != 0:
            raise HazardError(f"ibv_dontfork_range() failed: {os.strerror(abs(rc))}")
        after = _FORK_STATES.get(verbs.ibv_is_fork_initialized(), "unknown")
        hazard = Hazard(
            "verbs",
            _library_path("libibverbs.so"),
            start,
            length,
            arena,
            buf,
            before,
            after,
        )
    else:
        if libc.madvise(start, length, MADV_DONTFORK) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"madvise(MADV_DONTFORK): {os.strerror(err)}")
        hazard = Hazard("madvise", None, start, length, arena, buf)

    if not _is_dontfork(arena):
        raise HazardError(
            f"{hazard.method} reported success but the arena page at {arena:#x} is not DONTFORK"
        )
    return hazard
