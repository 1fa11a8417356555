"""``rdmaspawn doctor [--pid PID | --all] [--json]``.

Exit status: 0 OK, 1 HAZARD (with ``--all``: any process hazardous), 2 the
process could not be inspected (no such process, not allowed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ..._host.hidden import hidepid, is_hidden
from ..._host.processinfo import CAP_SYS_PTRACE, has_capability
from ..._host.procfs import NoSuchProcessError
from .inforce import UNKNOWN
from .process import doctor
from .scan import scan_node

__all__ = ["hidden_message", "main", "not_allowed_message"]


def not_allowed_message(pid: int) -> str:
    """Why reading ``pid``'s memory map was refused, and what would help."""
    head = f"not allowed to read the memory map of pid {pid}"
    if os.geteuid() != 0:
        return f"{head} (run as the same user, or as root)"
    if has_capability(CAP_SYS_PTRACE) is False:
        return (f"{head}: running as root, but without CAP_SYS_PTRACE (a container, or "
                "dropped capabilities), so the kernel refuses another user's or a "
                "non-dumpable process's memory map even to root; run the doctor inside that "
                "process's container, or give it CAP_SYS_PTRACE")
    return (f"{head}: refused even to root with CAP_SYS_PTRACE (a security module such as "
            "SELinux or AppArmor, or a process in another user namespace); run the doctor "
            "next to that process, in its container")


def hidden_message(pid: int) -> str:
    """A live process that /proc does not show this user: what that leaves unknown."""
    option = hidepid()
    how = f"/proc is mounted with hidepid={option}" if option else "/proc does not list it"
    return (f"pid {pid} is a live process, but {how}: whether it holds MADV_DONTFORK memory, "
            "and whether rdmaspawn protects it, is unknown (run as root, as its user, or "
            "with /proc's gid= group)")


def main(argv: Sequence[str] | None = None, prog: str = "rdmaspawn doctor") -> int:
    """Run the doctor's command line; return the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Check whether a process can safely fork() (MADV_DONTFORK memory, "
                    "libibverbs fork support, subprocess and multiprocessing paths).",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--pid", type=int, default=None,
                       help="inspect this process instead of the doctor's own")
    which.add_argument("--all", action="store_true",
                       help="every process on this node the caller may read: one line each "
                            "for those holding MADV_DONTFORK memory, then a summary")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output (with --all: JSON lines)")
    args = parser.parse_args(argv)
    if args.all:
        scan = scan_node()
        sys.stdout.write(scan.to_json_lines() if args.json else scan.to_text())
        return scan.exit_code
    try:
        if args.pid is not None and args.pid <= 0:
            raise ValueError(f"pid must be positive, not {args.pid}")
        report = doctor(args.pid)
    except NoSuchProcessError:
        if args.pid is not None and is_hidden(args.pid):
            return _fail(hidden_message(args.pid), args.json, live=True)
        return _fail(f"no process with pid {args.pid}", args.json)
    except PermissionError:
        return _fail(not_allowed_message(args.pid), args.json, live=True)
    except (OSError, ValueError) as e:
        return _fail(str(e), args.json)
    sys.stdout.write(report.to_json() + "\n" if args.json else report.to_text())
    return report.exit_code


def _fail(message: str, as_json: bool, live: bool = False) -> int:
    """Exit 2 with ``message``; ``live``: a process that is there but cannot be read,
    whose protection is then "unknown" (never "protected")."""
    if as_json:
        out: dict[str, object] = {"error": message}
        if live:
            out["rdmaspawn"] = {"protection": UNKNOWN}
        sys.stdout.write(json.dumps(out) + "\n")
    sys.stderr.write(f"rdmaspawn doctor: {message}\n")
    return 2
