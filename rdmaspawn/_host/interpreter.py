"""Start a helper interpreter that imports this very rdmaspawn, wherever it runs.

``python -c`` puts the current directory first on ``sys.path``, where another
``rdmaspawn`` (a source tree without its build) would win: the helper's first
line puts this package's ``sys.path`` entry in front instead.
"""
from __future__ import annotations

import os
import sys

__all__ = ["python_command"]

#: The sys.path entry this rdmaspawn was imported from (site-packages, or a
#: checkout's root for an editable install); this module sits in rdmaspawn/_host/.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_command(code: str, *args: str) -> list[str]:
    """argv that runs ``code`` in a fresh ``sys.executable`` importing this rdmaspawn."""
    prelude = (
        "import sys\n"
        "if sys.path and sys.path[0] == '':\n"
        "    del sys.path[0]\n"
        f"sys.path.insert(0, {PACKAGE_PARENT!r})\n"
    )
    return [sys.executable, "-c", prelude + code, *args]
