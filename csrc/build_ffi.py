"""cffi builder (API mode) for rdmaspawn's C core.

The cdef is the marked block of rdmaspawn.h, so the header documents exactly
what Python can call through cffi. python/*.c, which use the Python C API,
are compiled in too: the same file is also the extension module
rdmaspawn._native._capi (python/functions.c; see rdmaspawn/_native/capi.py).
setup.py names this file in ``cffi_modules``.
"""
import glob
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = sorted(glob.glob(os.path.join(HERE, "*.c")) + glob.glob(os.path.join(HERE, "python", "*.c")))


def _cdef() -> str:
    with open(os.path.join(HERE, "rdmaspawn.h")) as f:
        text = f.read()
    return text.split("/* cdef-begin */", 1)[1].split("/* cdef-end */", 1)[0]


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "rdmaspawn._rdmaspawn_cffi",
    '#include "rdmaspawn.h"',
    # setuptools wants source paths relative to the project root.
    sources=[os.path.relpath(s) for s in SOURCES],
    include_dirs=[HERE, os.path.join(HERE, "python")],
    libraries=["dl", "pthread"],
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
