"""Every child interpreter a test starts imports the rdmaspawn pytest imports.

``python -c``/``python -m`` put the current directory first on sys.path, and
from the repository root that is the source tree, which has no compiled
extension when the package was installed with pip. So the session runs from
an empty directory, with PYTHONPATH led by where this process found
rdmaspawn (hazard_helpers.child_env): an in-place build in a checkout, the
installed package under CI.
"""
from __future__ import annotations

import os
from typing import Iterator

import pytest
from hazard_helpers import child_env


@pytest.fixture(autouse=True, scope="session")
def _children_import_this_rdmaspawn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    cwd, pythonpath = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(tmp_path_factory.mktemp("cwd"))
    os.environ["PYTHONPATH"] = child_env()["PYTHONPATH"]
    try:
        yield
    finally:
        os.chdir(cwd)
        if pythonpath is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = pythonpath
