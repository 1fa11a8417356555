"""``python -m rdmaspawn {doctor,demo,bench,run,taskprolog}`` and the ``rdmaspawn`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


#: Each subcommand and its line in ``rdmaspawn --help``.
_COMMANDS = {
    "doctor": "check whether a process can safely fork() (--pid PID | --all, --json)",
    "demo": "show a fork()ed child crash where rdmaspawn's child runs",
    "bench": "measure spawn latency (arguments go to the benchmark)",
    "run": "run a command with rdmaspawn in force in all its Python processes "
           "(rdmaspawn run [options] -- CMD ARGS...)",
    "taskprolog": "for a Slurm TaskProlog: print 'export RDMASPAWN=on' where this node "
                  "is affected, nothing elsewhere; always exits 0 (docs/slurm.md)",
}


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
    parser = argparse.ArgumentParser(
        prog="rdmaspawn",
        description="Start child processes safely from processes that hold RDMA-registered "
                    "(MADV_DONTFORK) memory.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_line in _COMMANDS.items():
        sub.add_parser(name, add_help=False, help=help_line)
    parser.parse_args(args)  # --help or an unknown command: argparse exits
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
