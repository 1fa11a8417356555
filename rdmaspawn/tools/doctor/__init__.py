"""``rdmaspawn doctor``: is it safe for this process (or another, or any on the node) to ``fork()``?

The rooms: :mod:`.facts` (versions and kernel facts), :mod:`.protection` (what
applies here, in words), :mod:`.process` (one process's facts), :mod:`.report`
and :mod:`.verdict` (the report and its verdict), :mod:`.scan` (``--all``),
:mod:`.cli` (the command line); what each mapping overlaps, and whether a
fork() trips on it, is :mod:`rdmaspawn._host.forkrisk`'s (the guard's rule too).
"""

from __future__ import annotations

from .cli import main
from .process import doctor
from .report import Report
from .scan import scan_node

__all__ = ["Report", "doctor", "main", "scan_node"]
