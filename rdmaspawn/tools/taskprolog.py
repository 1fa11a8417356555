"""``rdmaspawn taskprolog``: one switch for a Slurm cluster (docs/slurm.md).

Slurm applies each ``export NAME=VALUE`` line a ``TaskProlog`` prints to the
task's environment. This prints ``export RDMASPAWN=on`` where the node's
libibverbs would mark registered memory ``MADV_DONTFORK`` once fork protection
is on (the doctor's rule: whether a job registers memory is not known before
it runs), and nothing elsewhere. No RDMA device is required by default:
marking needs none and a device can appear later. A task that sets
``RDMASPAWN`` itself keeps it. It never fails a job: whatever goes wrong, it
exits 0 with nothing on stdout and one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence

from .._startup.switch import VARIABLE
from .doctor.protection import VerbsFacts, judge_protection, verbs_facts

__all__ = ["Decision", "NodeFacts", "decide", "main", "node_facts"]

#: The line Slurm applies to the task's environment.
EXPORT_LINE = f"export {VARIABLE}=on"

#: Where the kernel lists RDMA devices (one entry per device: mlx5_0, rxe0, ...).
RDMA_DEVICES_DIR = "/sys/class/infiniband"


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What the decision is made from: the doctor's libibverbs and kernel facts, and RDMA devices."""

    verbs: VerbsFacts
    devices: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether to turn rdmaspawn on for the task, and why (one line)."""

    export: bool
    reason: str


def node_facts() -> NodeFacts:
    """This node's facts: libibverbs' own answer from the C engine, as for the doctor."""
    from .._native.forkstatus import fork_status

    status = fork_status()
    path = os.path.realpath(status.library) if status.library else None
    try:
        devices = tuple(sorted(os.listdir(RDMA_DEVICES_DIR)))
    except FileNotFoundError:
        devices = ()
    return NodeFacts(verbs_facts(path, status.state), devices)


def decide(facts: NodeFacts, env: Mapping[str, str], require_device: bool = False) -> Decision:
    """The rule: export where the doctor says libibverbs marks here (and, with
    ``require_device``, an RDMA device exists), unless the task set RDMASPAWN."""
    if VARIABLE in env:
        return Decision(False, f"the task sets {VARIABLE}={env[VARIABLE]!r} itself: kept")
    protection = judge_protection(facts.verbs)
    why = (f"({protection.case}; RDMA devices: {', '.join(facts.devices) or 'none'}): "
           f"{protection.text}")
    if not protection.marks:
        return Decision(False, f"not affected {why}")
    if require_device and not facts.devices:
        return Decision(False, f"affected in principle ({protection.case}) but no RDMA device "
                               f"in {RDMA_DEVICES_DIR} and --require-device was given")
    return Decision(True, f"affected {why}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the export line or nothing; return 0 whatever happens."""
    try:
        parser = argparse.ArgumentParser(
            prog="rdmaspawn taskprolog",
            description=f"For a Slurm TaskProlog: print '{EXPORT_LINE}' where this node is "
                        "affected by the MADV_DONTFORK hazard (the doctor's rule), nothing "
                        "elsewhere. Always exits 0. See docs/slurm.md.",
        )
        parser.add_argument("--require-device", action="store_true",
                            help=f"affected only where an RDMA device exists ({RDMA_DEVICES_DIR})")
        parser.add_argument("-v", "--verbose", action="store_true",
                            help="say on stderr what was decided and why")
        ns = parser.parse_args(argv)
        decision = decide(node_facts(), os.environ, ns.require_device)
        if decision.export:
            sys.stdout.write(EXPORT_LINE + "\n")
            sys.stdout.flush()
    except SystemExit as e:  # --help, or bad options: argparse has said why
        if e.code not in (0, None):
            sys.stderr.write("rdmaspawn taskprolog: bad options, rdmaspawn left off\n")
        return 0
    except Exception as e:  # never fail the job: say why on stderr, leave the task as it is
        sys.stderr.write(f"rdmaspawn taskprolog: rdmaspawn left off: cannot decide "
                         f"({type(e).__name__}: {e})\n")
        return 0
    if ns.verbose:
        sys.stderr.write(f"rdmaspawn taskprolog: {'on' if decision.export else 'left off'}: "
                         f"{decision.reason}\n")
    return 0
