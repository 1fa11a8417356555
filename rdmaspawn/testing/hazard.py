"""Plant the real MADV_DONTFORK hazard in the current process (Linux, glibc).

Once ``ibv_fork_init()`` has run, libibverbs marks every registered buffer
``MADV_DONTFORK``, rounded out to whole pages. Where such a page also holds a
malloc arena, a ``fork()`` child dies with SIGSEGV before it can ``exec``:
glibc's fork handler (``__malloc_fork_unlock_child``) writes every arena's
mutex. A ``CLONE_VM`` child shares the parent's memory and never notices.
:func:`plant` does this without RDMA hardware: a fresh thread's ``malloc()``
comes from a fresh thread arena, and its page is marked through libibverbs
(``ibv_dontfork_range()``, as ``ibv_reg_mr()`` does) or with ``madvise()``.
There is no undo: plant it only in a throwaway process.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
import time

from .._host.glibcheap import thread_heap_base
from .._host.processinfo import thread_count
from .._host.procfs import is_dontfork, library_path, parse_maps, read_proc

__all__ = ["INSTALL_VERBS", "VERBS_LIBRARY", "Hazard", "HazardError", "plant", "verbs_available"]

#: The soname the verbs method loads (the one the system ``libibverbs1`` has).
VERBS_LIBRARY = "libibverbs.so.1"

#: How to install the system libibverbs, for messages.
INSTALL_VERBS = "apt-get install libibverbs1, or dnf install libibverbs"

MADV_DONTFORK = 10

# Above tcache's largest size (1032 bytes), so not another arena's chunk from
# the tcache, and below the mmap threshold (128 KiB), so from the thread's arena.
_BUFFER_SIZE = 16 * 1024

# ibv_is_fork_initialized() results.  rdma-core added the call in v35; an
# older libibverbs (33.2, Debian 11) has no such symbol and cannot say.
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
    #: First address marked and bytes marked (whole pages).
    start: int
    length: int
    #: Address of the malloc arena (``malloc_state``) left unmapped in a fork child.
    arena: int
    #: The buffer malloc()ed in the fresh thread (leaked on purpose).
    buffer: int
    #: ``ibv_is_fork_initialized()`` before and after (``"verbs"``), else ``None``;
    #: ``None`` too where the library has no such call (rdma-core before 35).
    fork_state_before: str | None = None
    fork_state_after: str | None = None
    #: Why ``"auto"`` planted with madvise instead of libibverbs, else ``None``.
    fallback: str | None = None


def _find_arena(buf: int, page: int) -> int:
    """The address of the malloc_state (arena) that owns ``buf``."""
    maps = parse_maps(read_proc("self", "maps"))
    heap = thread_heap_base(buf, maps)
    if heap is None:
        raise HazardError("the fresh thread's malloc() did not come from a thread arena "
                          "(main arena reused: too many arenas, or not glibc malloc)")
    # heap_info.ar_ptr is the first field.  In an arena's first heap the
    # malloc_state follows heap_info on the same page; in a later heap it
    # points back into the first one.  Both reads are of memory that maps
    # just showed to be a readable thread heap, so never a stray read.
    ar_ptr = ctypes.c_void_p.from_address(heap).value or 0
    first = thread_heap_base(ar_ptr, maps) if ar_ptr else None
    if first is None or not (first < ar_ptr < first + page):
        raise HazardError(f"unexpected glibc heap layout at {heap:#x}")
    return ar_ptr


def _alloc_in_fresh_thread(libc: ctypes.CDLL) -> int:
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    result = []

    def target() -> None:
        result.append(libc.malloc(_BUFFER_SIZE) or 0)

    tasks = thread_count()
    t = threading.Thread(target=target, name="rdmaspawn-hazard")
    t.start()
    t.join()
    # join() can return while the OS thread is still exiting (3.13), and
    # os.fork() on 3.12+ then warns that the process is multi-threaded.
    deadline = time.monotonic() + 2.0
    while thread_count() > tasks and time.monotonic() < deadline:
        time.sleep(0.001)
    if not result or not result[0]:
        raise HazardError("malloc() failed in the fresh thread")
    return result[0]


def _fork_state(verbs: ctypes.CDLL) -> str | None:
    """What ``ibv_is_fork_initialized()`` answers; None where the library has no such call."""
    is_initialized = getattr(verbs, "ibv_is_fork_initialized", None)
    return None if is_initialized is None else _FORK_STATES.get(is_initialized(), "unknown")


def _armed_verbs() -> tuple[ctypes.CDLL | None, str | None, str | None]:
    """libibverbs after ``ibv_fork_init()``, with its fork state before that; or
    ``(None, None, why not)``."""
    try:
        verbs = ctypes.CDLL(VERBS_LIBRARY, use_errno=True)
    except OSError:
        return None, None, f"cannot load {VERBS_LIBRARY} (to get it: {INSTALL_VERBS})"
    verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    before = _fork_state(verbs)
    if before == "unneeded":
        return None, None, ("ibv_is_fork_initialized() says fork support is unneeded "
                            "(kernel copy-on-fork): libibverbs will not mark DONTFORK")
    # ibv_fork_init() must come before any registration, so before the
    # buffer exists; like ibv_reg_mr(), ibv_dontfork_range() then marks it.
    rc = verbs.ibv_fork_init()
    if rc != 0:
        return None, None, f"ibv_fork_init() failed: {os.strerror(rc)}"
    return verbs, before, None


def verbs_available() -> bool:
    """Whether ``libibverbs.so.1`` can be loaded here."""
    try:
        ctypes.CDLL(VERBS_LIBRARY)
    except OSError:
        return False
    return True


def plant(method: str = "auto") -> Hazard:
    """Plant the DONTFORK-over-malloc-arena hazard in this process; return what was marked.

    ``method``: ``"verbs"``, the real ``libibverbs.so.1`` (:class:`HazardError`
    if it is missing, if ``ibv_fork_init()`` fails, or if it reports fork
    support "unneeded": it then marks nothing); ``"madvise"``, no libibverbs;
    ``"auto"``, ``"verbs"`` where it can plant, else ``"madvise"``. Afterwards
    every ``fork()`` child of this process dies with SIGSEGV before running any
    code; ``CLONE_VM`` children are unaffected.
    """
    if method not in ("auto", "verbs", "madvise"):
        raise ValueError(f"method must be 'auto', 'verbs' or 'madvise', not {method!r}")

    verbs, before, fallback = _armed_verbs() if method != "madvise" else (None, None, None)
    if verbs is None and method == "verbs":
        raise HazardError(fallback)

    libc = ctypes.CDLL(None, use_errno=True)
    page = os.sysconf("SC_PAGESIZE")
    buf = _alloc_in_fresh_thread(libc)
    arena = _find_arena(buf, page)
    # The buffer's pages where it shares the arena's page, else the arena's page.
    start = arena & ~(page - 1)
    length = page
    if buf & ~(page - 1) == start:
        length = ((buf + _BUFFER_SIZE + page - 1) & ~(page - 1)) - start

    if verbs is not None:
        rc = verbs.ibv_dontfork_range(start, length)
        if rc != 0:
            raise HazardError(f"ibv_dontfork_range() failed: {os.strerror(abs(rc))}")
        hazard = Hazard("verbs", library_path("libibverbs.so"), start, length, arena, buf,
                        before, _fork_state(verbs))
    else:
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.madvise(start, length, MADV_DONTFORK) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"madvise(MADV_DONTFORK): {os.strerror(err)}")
        hazard = Hazard("madvise", None, start, length, arena, buf, fallback=fallback)

    if not is_dontfork(arena):
        raise HazardError(f"{hazard.method} reported success but the arena page at "
                          f"{arena:#x} is not DONTFORK")
    return hazard
