"""libc through ctypes with its memory calls typed: the one setup child snippets share.

Without ``argtypes`` ctypes passes a Python int as a C int, which truncates an
address above 2**31, and without ``restype`` it reads mmap()'s result as one.
A snippet that maps, protects or marks memory imports this
(``from helpers.libc import libc, PAGE``) once ``tests/`` is on its path.
"""
from __future__ import annotations

import ctypes
import mmap

__all__ = ["MADV_DONTFORK", "MAP_FAILED", "PAGE", "libc"]

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

PAGE = mmap.PAGESIZE
#: <sys/mman.h>; the mmap module does not name it.
MADV_DONTFORK = 10
#: mmap()'s (void *)-1 as ctypes returns it.
MAP_FAILED = ctypes.c_void_p(-1).value
