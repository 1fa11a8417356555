"""``rdmaspawn doctor``: is it safe for this process (or another, or any on the node) to ``fork()``?

Whether a fork() trips on a mapping is :mod:`rdmaspawn._host.forkrisk`'s rule,
the guard's too.
"""

from __future__ import annotations

from .cli import main
from .process import doctor
from .report import Report
from .scan import scan_node

__all__ = ["Report", "doctor", "main", "scan_node"]
