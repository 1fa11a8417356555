"""``rdmaspawn doctor``: is it safe for this process (or another, or any on the node) to ``fork()``?

It reads ``/proc/PID/smaps`` for ``MADV_DONTFORK`` mappings (``dc``), says what
backs each one and whether it lies in memory that malloc or Python also use,
and gathers what decides whether a ``fork()`` happens and whether it hurts:
libibverbs and its fork status, the environment variables that switch fork
protection on, the kernel, the Python version and the paths its
``subprocess`` and ``multiprocessing`` take.  The verdict is ``OK`` or
``HAZARD`` with what to do.

The rooms: :mod:`.facts` (versions and kernel facts, one constant each),
:mod:`.protection` (what applies here, in words), :mod:`.process` (one
process's facts), :mod:`rdmaspawn._host.forkrisk` (what each mapping
overlaps, and whether a fork() trips on it: the guard's rule too),
:mod:`.report` and :mod:`.verdict` (the report and its verdict),
:mod:`.scan` (``--all``), :mod:`.cli` (the command line).
"""

from __future__ import annotations

from ..._host.forkrisk import Finding
from .cli import main
from .process import doctor
from .report import Report
from .scan import NodeScan, ProcessEntry, scan_node

__all__ = ["Finding", "NodeScan", "ProcessEntry", "Report", "doctor", "main", "scan_node"]
