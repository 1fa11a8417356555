"""``rdmaspawn run [options] -- CMD ARGS...``: start a whole job with rdmaspawn in force.

``run`` sets ``RDMASPAWN``, which every Python interpreter of CMD's tree
applies at start-up, and then *becomes* CMD as a shell would start it
(:mod:`.shellexec`): no process stays in between, so every signal reaches
CMD and CMD's exit status is the job's.
"""
from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Sequence

from .._startup.switch import GUARD_ACTIONS, ON, START_METHODS, VARIABLE, Settings
from .shellexec import exec_as_shell, initial_environ

__all__ = ["main"]

#: Exit statuses of a shell for a command it cannot start.
NOT_FOUND = 127
NOT_EXECUTABLE = 126
#: argparse's status for bad usage.
USAGE = 2


def _fail(message: str, status: int) -> int:
    sys.stderr.write(f"rdmaspawn run: {message}\n")
    return status


def main(argv: Sequence[str]) -> int:
    """Exec CMD (no return) or return the status of a failure to start it."""
    parser = argparse.ArgumentParser(
        prog="rdmaspawn run",
        usage="rdmaspawn run [options] -- CMD [ARGS...]",
        description="Run CMD with rdmaspawn in force in every Python process of its tree: "
                    f"sets {VARIABLE} (by default {ON.to_env()}) and execs CMD.",
    )
    parser.add_argument("--guard", choices=(*GUARD_ACTIONS, "off"), default=ON.guard,
                        help="what a fork() of a process holding MADV_DONTFORK memory does "
                             "(default: %(default)s, a ForkHazardError instead of a crash)")
    parser.add_argument("--start-method", choices=(*START_METHODS, "keep"),
                        default=ON.start_method,
                        help="multiprocessing's default start method where the program "
                             "chooses none and the fork repair cannot apply (default: "
                             "%(default)s, CPython 3.14+'s own default; keep: CPython's, "
                             "fork on 3.9-3.13)")
    parser.add_argument("--repair", choices=("auto", "off"), default="auto",
                        help="auto (default): where the kernel reports copy-on-fork, keep "
                             "libibverbs' MADV_DONTFORK marks off the pages a fork() child needs "
                             "(rdmaspawn.repair_fork()); there --start-method is not applied "
                             "and fork stays fork. off: never")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="each Python process says on stderr what it applied")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD [ARGS...]")
    ns = parser.parse_args(list(argv))
    command: list[str] = ns.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        return _fail("no command given (usage: rdmaspawn run [options] -- CMD [ARGS...])", USAGE)
    env = initial_environ()  # not what Python's start-up changed
    env[VARIABLE] = Settings(
        patch=True, guard=None if ns.guard == "off" else ns.guard,
        start_method=None if ns.start_method == "keep" else ns.start_method,
        verbose=ns.verbose, repair=ns.repair == "auto",
    ).to_env()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        exec_as_shell(command, env)
    except FileNotFoundError:
        return _fail(f"{command[0]}: command not found", NOT_FOUND)
    except OSError as exc:  # ENOENT: e.g. a script whose interpreter is missing
        return _fail(f"{command[0]}: {exc.strerror}",
                     NOT_FOUND if exc.errno == errno.ENOENT else NOT_EXECUTABLE)
