"""cffi builder (API mode) for rdmaspawn's C core.

The cdef is the marked blocks of the headers in CDEF_HEADERS, so the headers
document exactly what Python can call through cffi. python/*.c, which use
the Python C API, are compiled in too (see rdmaspawn/_native/capi.py).
setup.py names this file in ``cffi_modules``.
"""
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["spawn.c", "child.c", "report.c", "forkinit.c", "forkprobe.c", "exactmarks.c", "forkrepair.c", "forkwatch.c", "gotslot.c", "marker.c", "packed.c",
           "mapwalk.c", "setup.c", "unmark.c", "python/environ.c", "python/errpipe.c", "python/fork_exec.c", "python/functions.c",
           "python/heldfork.c", "python/plain.c", "python/popen_init.c", "python/posix_spawn.c",
           "python/sigint.c", "python/spawn_request.c"]
# The headers whose marked block is the cdef: the engine's, and what
# python/ adds for the binding alone.
CDEF_HEADERS = ["rdmaspawn.h", "python/binding.h"]


def _cdef() -> str:
    blocks = []
    for name in CDEF_HEADERS:
        with open(os.path.join(HERE, name)) as f:
            text = f.read()
        blocks.append(text.split("/* cdef-begin */", 1)[1].split("/* cdef-end */", 1)[0])
    return "\n".join(blocks)


def _relative(path: str) -> str:
    # setuptools wants source paths relative to the project root.
    return os.path.relpath(os.path.join(HERE, path))


ffibuilder = FFI()
ffibuilder.cdef(_cdef())
ffibuilder.set_source(
    "rdmaspawn._rdmaspawn_cffi",
    '#include "rdmaspawn.h"\n#include "binding.h"',
    sources=[_relative(s) for s in SOURCES],
    include_dirs=[HERE, os.path.join(HERE, "python")],
    libraries=["dl", "pthread"],
    extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
