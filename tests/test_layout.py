"""The package's directories and pyproject.toml's explicit package list agree.

setuptools installs only the packages ``[tool.setuptools] packages`` names: a
new subpackage left out of it works from a checkout and is missing from the
wheel. Each directory of Python files under ``rdmaspawn/`` (and ``benchmarks/``,
installed as ``rdmaspawn.bench``) must be a package that the list names, and
the list must name nothing else.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _setuptools_table() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        table: dict[str, Any] = tomllib.load(f)["tool"]["setuptools"]
    return table


def _directories_of_python(top: Path) -> set[Path]:
    return {Path(d) for d, dirs, files in os.walk(top)
            if "__pycache__" not in Path(d).parts and any(f.endswith(".py") for f in files)}


def _source_dir(name: str, package_dir: dict[str, str]) -> Path:
    """Where setuptools takes the package ``name`` from."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        mapped = package_dir.get(".".join(parts[:i]))
        if mapped is not None:
            return ROOT.joinpath(mapped, *parts[i:])
    return ROOT.joinpath(*parts)


def test_every_package_directory_is_listed_and_nothing_else() -> None:
    table = _setuptools_table()
    listed = {_source_dir(name, table.get("package-dir", {})) for name in table["packages"]}
    on_disk = _directories_of_python(ROOT / "rdmaspawn") | _directories_of_python(
        ROOT / "benchmarks")
    assert sorted(map(str, on_disk - listed)) == [], "directories missing from packages"
    assert sorted(map(str, listed - on_disk)) == [], "listed packages with no directory"


def test_every_package_directory_has_an_init() -> None:
    """A directory without ``__init__.py`` would import as a namespace package
    from a checkout and still be left out of the wheel."""
    for d in _directories_of_python(ROOT / "rdmaspawn") | _directories_of_python(
            ROOT / "benchmarks"):
        assert (d / "__init__.py").is_file(), d
