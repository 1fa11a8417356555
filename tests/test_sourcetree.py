"""Importing rdmaspawn from a source tree without its compiled core fails in one line.

Each case runs a fresh interpreter in a copy of the package's Python files (no
``.so``), laid out as a checkout (``setup.py`` beside ``rdmaspawn/``) or as a
broken installation, with the copy's parent first on ``sys.path`` as
``python -c`` from a checkout's root puts it. ``-S`` keeps this test run's own
installation out (an editable install's finder would lend the copy its core).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import rdmaspawn

PACKAGE = Path(rdmaspawn.__file__).resolve().parent


def _copy_package(parent: Path) -> None:
    shutil.copytree(PACKAGE, parent / "rdmaspawn",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.c"))


def _import_error(cwd: Path, pythonpath: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RDMASPAWN")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    r = subprocess.run([sys.executable, "-S", "-c", "import rdmaspawn"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: "), r.stderr
    return last


def test_checkout_without_build_says_build_it_in_place(tmp_path: Path) -> None:
    """A checkout with no compiled core and no other rdmaspawn installed: build in place."""
    (tmp_path / "setup.py").write_text("")
    _copy_package(tmp_path)
    line = _import_error(tmp_path)
    assert f"this is the source tree {tmp_path}, which has no compiled core" in line
    assert "pip install -e ." in line


def test_checkout_shadowing_an_installed_copy_names_both(tmp_path: Path) -> None:
    """With another rdmaspawn installed, the message names it and says to start elsewhere
    (not "install the package", which is already done)."""
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    checkout.mkdir()
    (checkout / "setup.py").write_text("")
    _copy_package(checkout)
    (site / "rdmaspawn").mkdir(parents=True)
    (site / "rdmaspawn" / "__init__.py").write_text("")
    line = _import_error(checkout, pythonpath=site)
    assert f"it shadows the rdmaspawn installed in {site / 'rdmaspawn'}" in line
    assert "start Python outside the checkout" in line


def test_installation_missing_its_core_says_reinstall(tmp_path: Path) -> None:
    """No setup.py beside the package: an installation that lost its core, not a checkout."""
    _copy_package(tmp_path)
    line = _import_error(tmp_path)
    assert "the installation is incomplete" in line and "reinstall" in line


_CFFI_HALF_ONLY = """
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_rdmaspawn_cffi", NULL, -1, NULL,
                                 NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__rdmaspawn_cffi(void) { return PyModule_Create(&def); }
"""


def test_a_core_without_its_extension_half_fails_at_import(tmp_path: Path) -> None:
    """A core file that loads as the cffi module but lacks csrc/python/'s module
    init (a build older than the sources, say) is refused by the first import,
    naming the file and the missing init, not at the first spawn."""
    import sysconfig

    (tmp_path / "setup.py").write_text("")
    _copy_package(tmp_path)
    source = tmp_path / "stub.c"
    source.write_text(_CFFI_HALF_ONLY)
    core = tmp_path / "rdmaspawn" / "_rdmaspawn_cffi.abi3.so"
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC",
                    f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(core)],
                   check=True)
    line = _import_error(tmp_path)
    assert f"rdmaspawn's C core {core} does not load" in line
    assert "PyInit__capi" in line
