"""``python -m rdmaspawn {doctor,demo,bench,run,taskprolog}`` and the ``rdmaspawn`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rdmaspawn",
        description="Start child processes safely from processes that hold RDMA-registered "
                    "(MADV_DONTFORK) memory.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("doctor", add_help=False,
                   help="check whether a process can safely fork() (--pid PID | --all, --json)")
    sub.add_parser("demo", add_help=False,
                   help="show a fork()ed child crash where rdmaspawn's child runs")
    sub.add_parser("bench", add_help=False,
                   help="measure spawn latency (arguments go to the benchmark)")
    sub.add_parser("run", add_help=False,
                   help="run a command with rdmaspawn in force in all its Python processes "
                        "(rdmaspawn run [options] -- CMD ARGS...)")
    sub.add_parser("taskprolog", add_help=False,
                   help="for a Slurm TaskProlog: print 'export RDMASPAWN=on' where this node "
                        "is affected, nothing elsewhere; always exits 0 (docs/slurm.md)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; return its exit status."""
    args: list[str] = list(sys.argv[1:] if argv is None else argv)
    # Each subcommand parses its own arguments (and its own --help).
    if args and args[0] == "doctor":
        from .tools.doctor import main as doctor_main

        return doctor_main(args[1:])
    if args and args[0] == "demo":
        from .tools.demo import main as demo_main

        return demo_main(args[1:])
    if args and args[0] == "bench":
        from .bench.cli import main as bench_main

        return int(bench_main(args[1:]) or 0)
    if args and args[0] == "run":
        from .tools.run import main as run_main

        return run_main(args[1:])
    if args and args[0] == "taskprolog":
        from .tools.taskprolog import main as taskprolog_main

        return taskprolog_main(args[1:])
    parser = _parser()
    ns = parser.parse_args(args)
    if ns.command is None:
        parser.print_help()
        return 2
    return 2  # pragma: no cover - every known command returned above


if __name__ == "__main__":
    sys.exit(main())
