"""A stand-in libibverbs built from C source by a test: the real library
answers "unneeded" only where an RDMA driver is loaded, which this host lacks,
and this host's is one release (the rxe lane runs the others on a device)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: rdma-core 33's fork bookkeeping (libibverbs/memory.c of v33.2, Debian 11):
#: ibv_fork_init() turns marking on unless a range went by before it
#: (too_late: EINVAL), ranges are marked with madvise() once it is on, and
#: there is no ibv_is_fork_initialized() (v35 added it): nothing says the state.
RDMA_CORE_33 = r"""
#include <errno.h>
#include <stddef.h>
#include <sys/mman.h>
static int on, too_late;
int ibv_fork_init(void)
{
    if (on)
        return 0;
    if (too_late)
        return EINVAL;
    on = 1;
    return 0;
}
static int range(void *a, size_t n, int advice)
{
    if (!on) {
        too_late = 1;
        return 0;
    }
    return madvise(a, n, advice);
}
int ibv_dontfork_range(void *a, size_t n) { return range(a, n, MADV_DONTFORK); }
int ibv_dofork_range(void *a, size_t n) { return range(a, n, MADV_DOFORK); }
"""


def build(tmp_path_factory: pytest.TempPathFactory, source: str) -> Path:
    """``source`` compiled as libibverbs.so.1 in a fresh folder; skip without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libibverbs")
    d = tmp_path_factory.mktemp("verbs")
    (d / "verbs.c").write_text(source)
    lib = d / "libibverbs.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(d / "verbs.c")], check=True)
    return lib
