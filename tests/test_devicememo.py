"""tools/devicememo: device memory a fork() child lacks, remembered, and nothing else excused."""

from __future__ import annotations

import os

import pytest

from rdmaspawn.tools import devicememo

PAGE = os.sysconf("SC_PAGE_SIZE")


def _entry(lo: int, pages: int, path: str, flags: str) -> str:
    head = f"{lo:x}-{lo + pages * PAGE:x} rw-s 00000000 00:05 17 {path}".rstrip()
    return f"{head}\nSize: {pages * PAGE // 1024} kB\nRss: 0 kB\nVmFlags: {flags} \n"


DOORBELL = (0x7F0000000000, 1, "/dev/infiniband/uverbs0", "rd wr sh mr mw me ms io dc de dd")
RING = (0x7F0000010000, 4, "/dev/infiniband/uverbs0", "rd wr sh mr mw me ms dc de")
NOT_MARKED = (0x7F0000020000, 2, "/dev/nvidia0", "rd wr sh mr mw me ms io de")
SHM = (0x7F0000030000, 3, "/dev/shm/buffer", "rd wr sh mr mw me ms dc")  # memory, not a device


def _smaps(*entries: tuple[int, int, str, str]) -> bytes:
    return "".join(_entry(*e) for e in entries).encode()


def _maps(*entries: tuple[int, int, str, str]) -> bytes:
    return b"".join(_entry(*e).encode().split(b"\n", 1)[0] + b"\n" for e in entries)


@pytest.fixture
def maps_now(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    now = [b""]
    monkeypatch.setattr(devicememo, "read_proc", lambda pid, name: now[0])
    monkeypatch.setattr(devicememo, "_pages", {})
    return now


def test_only_the_remembered_device_pages_are_excused(maps_now: list[bytes]) -> None:
    """5 pages left out, all marked device memory seen before and still
    mapped: excused. Any other count, a device mapping gone or a new one: not."""
    devicememo.learn(_smaps(DOORBELL, RING, NOT_MARKED, SHM))
    maps_now[0] = _maps(DOORBELL, RING, NOT_MARKED, SHM)
    assert devicememo.explains(5) is True
    assert devicememo.explains(8) is False    # the /dev/shm pages are memory: never excused
    assert devicememo.explains(4) is False
    assert devicememo.explains(0) is False and devicememo.explains(-1) is False
    maps_now[0] = _maps(RING, NOT_MARKED, SHM)  # the doorbell unmapped: 4 != 5
    assert devicememo.explains(5) is False
    other = (0x7F0000040000, 1, "/dev/infiniband/uverbs1", "rd wr sh mr mw me ms io dc de dd")
    maps_now[0] = _maps(RING, NOT_MARKED, other)  # one device mapping for another, same count
    assert devicememo.explains(5) is False


def test_nothing_is_excused_before_a_look(maps_now: list[bytes]) -> None:
    """No smaps read yet (or one without marked device memory): no count is excused."""
    maps_now[0] = _maps(DOORBELL, RING)
    assert devicememo.explains(5) is False
    devicememo.learn(_smaps(NOT_MARKED))
    assert devicememo.explains(0) is False and devicememo.explains(2) is False
