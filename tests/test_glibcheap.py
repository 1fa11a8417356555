"""_host/glibcheap: a thread heap's layout, and the heap_info header glibc wrote there."""
from __future__ import annotations

from helpers.child import run_json


def test_header_of_a_real_thread_heap_and_of_a_look_alike() -> None:
    """A thread arena's heap (made by a thread's malloc) has glibc's header: True.
    A 64 MiB-aligned anonymous block of zeros laid out the same: the layout says
    heap, the header says no (False)."""
    out = run_json("""
        import ctypes, json, threading
        from helpers.libc import libc
        from rdmaspawn._host.glibcheap import HEAP_MAX_SIZE, heap_header, thread_heap_base
        from rdmaspawn._host.procfs import all_mappings
        libc.malloc.restype = ctypes.c_void_p
        got = []
        t = threading.Thread(target=lambda: got.append(libc.malloc(4096)))
        t.start(); t.join()
        size = HEAP_MAX_SIZE
        area = libc.mmap(None, 3 * size, 0, 0x22, -1, 0)
        fake = (area + size) & ~(size - 1)
        assert libc.mprotect(fake, size, 3) == 0
        maps = all_mappings()
        real = thread_heap_base(got[0], maps)
        print(json.dumps({
            "real_layout": real is not None,
            "real": heap_header(real, maps) if real else None,
            "fake_layout": thread_heap_base(fake, maps) == fake,
            "fake": heap_header(fake, maps),
        }))
    """)
    assert out == {"real_layout": True, "real": True, "fake_layout": True, "fake": False}
