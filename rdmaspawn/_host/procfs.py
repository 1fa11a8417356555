"""The one reader of ``/proc/PID/{smaps,maps}``, and :func:`read_proc`, the
one way to read a ``/proc/PID`` file.

``madvise(MADV_DONTFORK)`` shows as ``dc`` on a mapping's ``VmFlags:`` line:
a ``fork()`` child gets no copy of it. :func:`has_dontfork` runs before a
spawn that must fork, so it searches the bytes and builds no object.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import NamedTuple, Union

__all__ = [
    "Mapping",
    "NoSuchProcessError",
    "Pid",
    "all_mappings",
    "device_dontfork_pages",
    "device_headers",
    "dontfork_in",
    "dontfork_mappings",
    "has_dontfork",
    "is_device_path",
    "is_dontfork",
    "library_path",
    "library_paths",
    "mapping_at",
    "max_map_count",
    "parse_maps",
    "proc_path",
    "read_proc",
    "status_field",
]

Pid = Union[int, str]

_VMFLAGS = b"VmFlags:"
# The kernel prints every flag as two letters and a space ("%c%c ").
_DC = b" dc "


class NoSuchProcessError(ProcessLookupError, FileNotFoundError):
    """There is no process with that pid (catch either base class)."""


class Mapping(NamedTuple):
    """One entry of ``/proc/PID/smaps`` (a NamedTuple: ``dataclasses`` would
    weigh on start-up under ``RDMASPAWN``)."""

    start: int
    end: int
    #: ``"rw-p"`` and the like.
    perms: str
    offset: int
    #: ``"fd:01"`` (major:minor of the backing file's device).
    dev: str
    inode: int
    #: The file, a pseudo-name (``"[heap]"``), or ``""`` for anonymous memory.
    path: str
    #: Two-letter kernel flags (``"rd"``, ``"wr"``, ``"dc"``, ...).
    vmflags: frozenset[str]
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
        """Driver memory (doorbells, device queues), see :func:`is_device_path`."""
        return is_device_path(self.path, "io" in self.vmflags or "pf" in self.vmflags)

    def describe(self) -> str:
        """``0x7f..000-0x7f..000 rw-p 4 KiB [heap]`` -- one line for messages."""
        what = self.path or "anonymous"
        return f"0x{self.start:x}-0x{self.end:x} {self.perms} {_human(self.size)} {what}"


def is_device_path(path: str, io_or_pfnmap: bool = False) -> bool:
    """Whether a mapping of ``path`` is driver memory, whose ``dc`` flag the driver set:
    the one rule, in C (``rs_driver_mapping``, csrc/unmark.c), for the doctor,
    the guard and the fork repair. The file's type decides, not its path
    (``/dev/shm`` and hugetlbfs are ordinary memory).
    """
    from .._rdmaspawn_cffi import lib  # the C core always ships (see _startup.sourcetree)

    return bool(lib.rs_driver_mapping(os.fsencode(path), int(io_or_pfnmap)))


def _human(n: int) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size = float(n)
    i = 0
    while size >= 1024 and i < len(units) - 1:
        size /= 1024
        i += 1
    return f"{size:.0f} {units[i]}" if size == int(size) else f"{size:.1f} {units[i]}"


def proc_path(pid: Pid, name: str) -> str:
    """``/proc/PID/name``, with ``pid`` checked (a positive int, digits, or 'self')."""
    if isinstance(pid, bool) or not isinstance(pid, (int, str)):
        raise TypeError(f"pid must be an int or 'self', not {pid!r}")
    if isinstance(pid, int):
        if pid <= 0:
            raise ValueError(f"pid must be positive, not {pid}")
    elif pid not in ("self", "thread-self") and not pid.isdigit():
        raise ValueError(f"pid must be a number or 'self', not {pid!r}")
    return f"/proc/{pid}/{name}"


def read_proc(pid: Pid, name: str) -> bytes:
    """The bytes of ``/proc/PID/name``; :class:`NoSuchProcessError` where there
    is no such process, :class:`PermissionError` where it may not be read."""
    path = proc_path(pid, name)
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read()  # FileIO.readall(): one buffer, grown as needed
    except FileNotFoundError:
        raise NoSuchProcessError(errno.ESRCH, f"no process with pid {pid}", path) from None
    except PermissionError as e:
        raise PermissionError(
            e.errno, f"not allowed to read {path} (another user's process, or not dumpable)",
            path,
        ) from None
    except ProcessLookupError:
        raise NoSuchProcessError(errno.ESRCH, f"process {pid} exited", path) from None


def status_field(pid: Pid, name: bytes) -> bytes | None:
    """The first word after ``name:`` in ``/proc/PID/status``, None where it has none."""
    for line in read_proc(pid, "status").split(b"\n"):
        if line.startswith(name + b":"):
            return line.split()[1]
    return None


def _lines_with(data: bytes, needle: bytes) -> list[tuple[int, int]]:
    """(line start, line end) of every line that holds ``needle``, each once."""
    lines = []
    pos = data.find(needle)
    while pos != -1:
        end = data.find(b"\n", pos)
        if end == -1:
            end = len(data)
        lines.append((data.rfind(b"\n", 0, pos) + 1, end))
        pos = data.find(needle, end)
    return lines


def _entries(data: bytes, needle: bytes = _VMFLAGS) -> list[bytes]:
    """The smaps entries whose ``VmFlags:`` line (every entry's last) holds ``needle``."""
    return [_block_of(data, s, e) for s, e in _lines_with(data, needle)
            if data.startswith(_VMFLAGS, s)]


def _block_of(data: bytes, vmflags_start: int, vmflags_end: int) -> bytes:
    # An entry starts after the previous one's VmFlags line.
    prev = data.rfind(b"\n" + _VMFLAGS, 0, vmflags_start - 1)
    start = 0 if prev == -1 else data.find(b"\n", prev + 1) + 1
    return data[start:vmflags_end]


def _header_path(block: bytes) -> bytes:
    header = block.split(b"\n", 1)[0]
    fields = header.split(None, 5)
    return fields[5] if len(fields) == 6 else b""


def has_dontfork(pid: Pid = "self", *, devices: bool = False) -> bool:
    """Whether the process has any ``MADV_DONTFORK`` mapping a ``fork()`` child
    could trip on (device mappings only with ``devices``)."""
    return any(devices or not is_device_path(os.fsdecode(_header_path(block)))
               for block in _entries(read_proc(pid, "smaps"), _DC))


def _parse_header(line: bytes) -> Mapping | None:
    """The mapping a ``maps`` line (or an ``smaps`` entry's first line) names; no flags yet."""
    fields = line.split(None, 5)
    if len(fields) < 5 or b"-" not in fields[0]:
        return None
    lo, _, hi = fields[0].partition(b"-")
    return Mapping(
        start=int(lo, 16),
        end=int(hi, 16),
        perms=fields[1].decode("ascii", "replace"),
        offset=int(fields[2], 16),
        dev=fields[3].decode("ascii", "replace"),
        inode=int(fields[4]),
        path=os.fsdecode(fields[5].rstrip(b"\n")) if len(fields) == 6 else "",
        vmflags=frozenset(),
    )


def _parse_block(block: bytes) -> Mapping | None:
    lines = block.split(b"\n")
    header = _parse_header(lines[0])
    if header is None:
        return None
    rss = 0
    flags: frozenset[str] = frozenset()
    for line in lines[1:]:
        if line.startswith(b"Rss:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                rss = int(parts[1])
        elif line.startswith(_VMFLAGS):
            flags = frozenset(os.fsdecode(f) for f in line.split()[1:])
    return header._replace(vmflags=flags, rss_kb=rss)


def all_mappings(pid: Pid = "self") -> list[Mapping]:
    """Every mapping of the process, in address order."""
    return [m for m in map(_parse_block, _entries(read_proc(pid, "smaps"))) if m is not None]


def dontfork_mappings(pid: Pid = "self", *, devices: bool = True) -> list[Mapping]:
    """The process's ``MADV_DONTFORK`` mappings, in address order (devices too unless told)."""
    return dontfork_in(read_proc(pid, "smaps"), devices=devices)


def dontfork_in(data: bytes, *, devices: bool = True) -> list[Mapping]:
    """:func:`dontfork_mappings` of ``smaps`` text already read."""
    return [m for m in map(_parse_block, _entries(data, _DC))
            if m is not None and (devices or not m.device)]


def device_headers(data: bytes) -> list[bytes]:
    """The first lines of the device-file mappings in ``maps`` or ``smaps`` text
    (the same line in either)."""
    lines = (data[start:end] for start, end in _lines_with(data, b" /dev/"))
    return [line for line in lines
            if _parse_header(line) and is_device_path(os.fsdecode(_header_path(line)))]


def device_dontfork_pages(data: bytes) -> dict[bytes, int]:
    """Each device-file mapping in ``smaps`` text (its first line) -> its pages if ``dc``, else 0."""
    out = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for line in device_headers(data):
        at = data.find(line)
        flags_at = data.find(b"\n" + _VMFLAGS, at)
        flags_end = data.find(b"\n", flags_at + 1)
        flags = data[flags_at:flags_end if flags_end != -1 else len(data)] + b" "
        lo, _, hi = line.split(None, 1)[0].partition(b"-")
        out[line] = (int(hi, 16) - int(lo, 16)) // page if _DC in flags else 0
    return out


def parse_maps(data: bytes) -> list[Mapping]:
    """Every mapping in the given ``maps`` text (``vmflags`` empty, ``rss_kb`` 0)."""
    return [m for m in map(_parse_header, data.split(b"\n")) if m is not None]


def library_paths(prefixes: Sequence[str], pid: Pid = "self") -> dict[str, str]:
    """For each prefix (a soname like ``"libibverbs.so"``), the first mapped file
    (symlinks resolved) whose base name starts with it; else left out."""
    found: dict[str, str] = {}
    for m in parse_maps(read_proc(pid, "maps")):
        if not m.path.startswith("/"):
            continue
        base = os.path.basename(m.path)
        for prefix in prefixes:
            if prefix not in found and base.startswith(prefix):
                found[prefix] = m.path
    return found


def library_path(prefix: str, pid: Pid = "self") -> str | None:
    """The mapped file whose base name starts with ``prefix``, else None (see :func:`library_paths`)."""
    return library_paths((prefix,), pid).get(prefix)


def mapping_at(addr: int, pid: Pid = "self") -> Mapping | None:
    """The ``smaps`` entry (with its flags) that holds ``addr``, else None."""
    for m in all_mappings(pid):
        if m.start <= addr < m.end:
            return m
    return None


def is_dontfork(addr: int, pid: Pid = "self") -> bool:
    """Whether the mapping holding ``addr`` is ``MADV_DONTFORK`` (False when nothing is mapped there)."""
    m = mapping_at(addr, pid)
    return m is not None and m.dontfork


def max_map_count() -> int | None:
    """``vm.max_map_count``: how many mappings a process may have; None if unreadable."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
