"""Start a helper interpreter that imports this very rdmaspawn, wherever it runs.

``python -c`` puts the current directory first on ``sys.path``; a directory
that holds another ``rdmaspawn`` (a source tree without its build, an older
copy) would then win over the one that started the helper. The helper's
first line drops that entry and puts this package's ``sys.path`` entry in
front, so the tools behave the same from a checkout's root as from ``/``.
"""
from __future__ import annotations

import os
import sys

__all__ = ["python_command"]

#: The sys.path entry this rdmaspawn was imported from (site-packages, or a
#: checkout's src/ for an editable install).
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_command(code: str, *args: str) -> list[str]:
    """argv that runs ``code`` in a fresh ``sys.executable`` importing this rdmaspawn."""
    prelude = (
        "import sys\n"
        "if sys.path and sys.path[0] == '':\n"
        "    del sys.path[0]\n"
        f"sys.path.insert(0, {PACKAGE_PARENT!r})\n"
    )
    return [sys.executable, "-c", prelude + code, *args]
