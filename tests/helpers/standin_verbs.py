"""A stand-in libibverbs built from C source by a test: the real library
answers "unneeded" only where an RDMA driver is loaded, which this host lacks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


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
