"""Read ``/proc/PID/smaps``: which mappings a ``fork()`` child would not get.

``madvise(MADV_DONTFORK)`` sets ``VM_DONTCOPY`` on a mapping; the kernel shows
it as the ``dc`` flag on the mapping's ``VmFlags:`` line (Linux >= 3.8,
``show_smap_vma_flags()`` in ``fs/proc/task_mmu.c``).  A ``fork()`` child gets
no copy of such a mapping at all: the address range is simply absent, and the
child dies with SIGSEGV the moment it touches it.

:func:`has_dontfork` is the hot path: it runs before a spawn that has to
``fork()``, so it only searches the raw bytes for ``" dc "`` and checks that the
hit is on a ``VmFlags:`` line (a file name can contain ``" dc "`` too), without
building any object.  Every flag is two letters followed by a space, so the
search cannot match a longer flag.  With 1000 mappings reading the file costs
the kernel about 1 ms and the search about 0.5 ms.

Device-driver mappings (``/dev/infiniband/uverbs*`` doorbells, ``/dev/nvidia*``)
are often ``dc`` too, set by the driver itself.  Nothing but the driver's
library touches them, and a ``fork()`` child that only ``exec()``\\ s never does,
so :func:`has_dontfork` leaves them out unless asked.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from typing import FrozenSet, List, Optional, Tuple, Union

__all__ = [
    "Mapping",
    "NoSuchProcessError",
    "all_mappings",
    "dontfork_mappings",
    "has_dontfork",
    "is_device_path",
    "read_proc",
    "read_smaps",
]

Pid = Union[int, str]

_VMFLAGS = b"VmFlags:"
# The kernel prints every flag as two letters and a space ("%c%c ").
_DC = b" dc "


class NoSuchProcessError(ProcessLookupError, FileNotFoundError):
    """There is no process with that pid (catch either base class)."""


@dataclasses.dataclass(frozen=True)
class Mapping:
    """One entry of ``/proc/PID/smaps``."""

    start: int
    end: int
    #: ``"rw-p"`` and the like.
    perms: str
    offset: int
    #: ``"fd:01"`` (major:minor of the backing file's device).
    dev: str
    inode: int
    #: The file, a pseudo-name (``"[heap]"``, ``"[stack]"``, ``"[anon:name]"``),
    #: or ``""`` for anonymous memory.  ``" (deleted)"`` is kept as the kernel
    #: shows it.
    path: str
    #: Two-letter kernel flags (``"rd"``, ``"wr"``, ``"dc"``, ...).
    vmflags: FrozenSet[str]
    #: Resident set size in kB (``Rss:``), 0 when not shown.
    rss_kb: int = 0

    @property
    def size(self) -> int:
        """Length in bytes."""
        return self.end - self.start

    @property
    def dontfork(self) -> bool:
        """Whether the mapping is ``MADV_DONTFORK`` (``VM_DONTCOPY``)."""
        return "dc" in self.vmflags

    @property
    def anonymous(self) -> bool:
        """Anonymous memory: no file and not a kernel pseudo-mapping (``[anon:x]`` counts)."""
        return self.path == "" or self.path.startswith("[anon:")

    @property
    def device(self) -> bool:
        """A mapping of a device file (driver memory, doorbells), see :func:`is_device_path`."""
        return is_device_path(self.path)

    def describe(self) -> str:
        """``0x7f..000-0x7f..000 rw-p 4 KiB [heap]`` -- one line for messages."""
        what = self.path or "anonymous"
        return "0x%x-0x%x %s %s %s" % (self.start, self.end, self.perms, _human(self.size), what)


def is_device_path(path: str) -> bool:
    """Whether ``path`` names a device file whose ``dc`` flag the driver set.

    ``/dev/shm`` (POSIX shared memory, tmpfs) and ``/dev/zero`` (shared
    anonymous memory) are ordinary memory and do not count.
    """
    if not path.startswith("/dev/"):
        return False
    return not (path.startswith("/dev/shm/") or path.startswith("/dev/zero"))


def _human(n: int) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size = float(n)
    i = 0
    while size >= 1024 and i < len(units) - 1:
        size /= 1024
        i += 1
    return ("%d %s" if size == int(size) else "%.1f %s") % (size, units[i])


def _proc_path(pid: Pid, name: str) -> str:
    if isinstance(pid, bool) or not isinstance(pid, (int, str)):
        raise TypeError("pid must be an int or 'self', not %r" % (pid,))
    if isinstance(pid, int):
        if pid <= 0:
            raise ValueError("pid must be positive, not %d" % pid)
    elif pid not in ("self", "thread-self") and not pid.isdigit():
        raise ValueError("pid must be a number or 'self', not %r" % (pid,))
    return "/proc/%s/%s" % (pid, name)


def read_proc(pid: Pid, name: str) -> bytes:
    """The bytes of ``/proc/PID/name``, with the errors named for what they mean.

    Raises :class:`NoSuchProcessError` when there is no such process and
    :class:`PermissionError` when the caller may not read it (another user's
    process, or one that is not dumpable, without ``CAP_SYS_PTRACE``).
    """
    path = _proc_path(pid, name)
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read()  # FileIO.readall(): one buffer, grown as needed
    except FileNotFoundError:
        raise NoSuchProcessError(errno.ESRCH, "no process with pid %s" % (pid,), path) from None
    except PermissionError as e:
        raise PermissionError(
            e.errno, "not allowed to read %s (another user's process, or not dumpable)" % path,
            path,
        ) from None
    except ProcessLookupError:
        raise NoSuchProcessError(errno.ESRCH, "process %s exited" % (pid,), path) from None


def read_smaps(pid: Pid = "self") -> bytes:
    """The raw bytes of ``/proc/PID/smaps`` (see :func:`read_proc` for the errors)."""
    return read_proc(pid, "smaps")


def _dc_hits(data: bytes) -> List[Tuple[int, int]]:
    """(line start, line end) of every ``VmFlags:`` line that carries ``dc``."""
    hits = []
    pos = data.find(_DC)
    while pos != -1:
        line_start = data.rfind(b"\n", 0, pos) + 1
        line_end = data.find(b"\n", pos)
        if line_end == -1:
            line_end = len(data)
        if data.startswith(_VMFLAGS, line_start):
            hits.append((line_start, line_end))
        pos = data.find(_DC, line_end)
    return hits


def _block_of(data: bytes, vmflags_start: int, vmflags_end: int) -> bytes:
    """The whole smaps entry that ends with the VmFlags line at ``vmflags_start``.

    ``VmFlags:`` is the last line of every entry, so the entry starts right
    after the previous ``VmFlags:`` line (or at the top of the file).
    """
    prev = data.rfind(b"\n" + _VMFLAGS, 0, vmflags_start - 1)
    if prev == -1:
        start = 0
    else:
        start = data.find(b"\n", prev + 1) + 1
    return data[start:vmflags_end]


def _header_path(block: bytes) -> bytes:
    header = block.split(b"\n", 1)[0]
    fields = header.split(None, 5)
    return fields[5] if len(fields) == 6 else b""


def has_dontfork(pid: Pid = "self", *, devices: bool = False) -> bool:
    """Whether the process has any ``MADV_DONTFORK`` mapping a ``fork()`` child could trip on.

    Device-file mappings are left out unless ``devices`` is true (see the
    module docstring).  This reads ``/proc/PID/smaps`` once and searches the
    bytes; it builds no objects for mappings without ``dc``.
    """
    data = read_smaps(pid)
    for line_start, line_end in _dc_hits(data):
        if devices:
            return True
        path = os.fsdecode(_header_path(_block_of(data, line_start, line_end)))
        if not is_device_path(path):
            return True
    return False


def _parse_block(block: bytes) -> Optional[Mapping]:
    lines = block.split(b"\n")
    fields = lines[0].split(None, 5)
    if len(fields) < 5 or b"-" not in fields[0]:
        return None
    lo, _, hi = fields[0].partition(b"-")
    path = os.fsdecode(fields[5].rstrip(b"\n")) if len(fields) == 6 else ""
    rss = 0
    flags: FrozenSet[str] = frozenset()
    for line in lines[1:]:
        if line.startswith(b"Rss:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                rss = int(parts[1])
        elif line.startswith(_VMFLAGS):
            flags = frozenset(os.fsdecode(f) for f in line.split()[1:])
    return Mapping(
        start=int(lo, 16),
        end=int(hi, 16),
        perms=fields[1].decode("ascii", "replace"),
        offset=int(fields[2], 16),
        dev=fields[3].decode("ascii", "replace"),
        inode=int(fields[4]),
        path=path,
        vmflags=flags,
        rss_kb=rss,
    )


def _is_header(line: bytes) -> bool:
    # Field lines are "Key:   value"; a header's first token is "lo-hi".
    head = line.split(b" ", 1)[0]
    return b"-" in head and not head.endswith(b":")


def parse_smaps(data: bytes) -> List[Mapping]:
    """Every mapping in the given ``smaps`` text, in address order."""
    out: List[Mapping] = []
    lines = data.split(b"\n")
    i = 0
    n = len(lines)
    while i < n:
        if not _is_header(lines[i]):
            i += 1
            continue
        j = i + 1
        while j < n and lines[j] and not _is_header(lines[j]):
            j += 1
        m = _parse_block(b"\n".join(lines[i:j]))
        if m is not None:
            out.append(m)
        i = j
    return out


def all_mappings(pid: Pid = "self") -> List[Mapping]:
    """Every mapping of the process, in address order."""
    return parse_smaps(read_smaps(pid))


def dontfork_mappings(pid: Pid = "self", *, devices: bool = True) -> List[Mapping]:
    """The process's ``MADV_DONTFORK`` mappings, in address order.

    Only the entries carrying ``dc`` are parsed.  Device-file mappings are
    included unless ``devices`` is false.
    """
    data = read_smaps(pid)
    out = []
    for line_start, line_end in _dc_hits(data):
        m = _parse_block(_block_of(data, line_start, line_end))
        if m is not None and (devices or not m.device):
            out.append(m)
    return out


# ---------------------------------------------------------------------------
# System-wide facts, for the benchmark's description of the machine.  Kept
# apart from the per-process readers above: they read files that are not
# under /proc/PID.


def _read_system_file(path: str) -> bytes:
    """The bytes of a system-wide /proc file; empty where it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes (``{"MemTotal": ..., "MemAvailable": ...}``);
    empty where it cannot be read.  Values the kernel gives in kB are scaled."""
    out: dict[str, int] = {}
    for line in _read_system_file("/proc/meminfo").split(b"\n"):
        key, _, rest = line.partition(b":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if parts[1:] == [b"kB"] else 1
            out[key.decode("ascii", "replace")] = int(parts[0]) * scale
    return out


# The keys under which the architectures' /proc/cpuinfo name the processor.
_CPU_MODEL_KEYS = ("model name", "Model", "Hardware", "cpu model")


def cpu_model() -> str | None:
    """The processor's name from ``/proc/cpuinfo``, or None."""
    for line in _read_system_file("/proc/cpuinfo").split(b"\n"):
        key, _, val = line.decode("utf-8", "replace").partition(":")
        if key.strip() in _CPU_MODEL_KEYS and val.strip():
            return val.strip()
    return None
