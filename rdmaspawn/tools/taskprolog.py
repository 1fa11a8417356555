"""``rdmaspawn taskprolog``: one switch for a Slurm cluster (docs/slurm.md).

Slurm runs a ``TaskProlog`` before each task and applies every
``export NAME=VALUE`` line it prints to the task's environment.  This command
prints ``export RDMASPAWN=on`` on a node that is *affected*, and nothing
elsewhere, so every Python task there starts with rdmaspawn in force (the
``rdmaspawn-autostart.pth`` hook reads the variable).

"Affected" is the doctor's rule (:func:`.doctor.protection.judge_protection`)
applied to the node, not a claim about any job: the node's libibverbs would
mark registered memory ``MADV_DONTFORK`` once fork protection is on
(``ibv_fork_init()``, ``RDMAV_FORK_SAFE``, UCX's default, NCCL), so a job
that registers memory there can crash its ``fork()`` children.  That holds
where libibverbs is installed and the kernel does not copy pinned pages at
fork (before Linux 5.13), or rdma-core is older than 51, or the kernel cannot
be asked (ib_core not loaded).  A node without libibverbs, or whose kernel
and rdma-core together mark nothing, is not affected.  Whether a job really
registers memory is not known before it runs.

An RDMA device is not required by default: ``ibv_fork_init()`` and
``ibv_dontfork_range()`` mark memory without one, and a device can appear
later (a soft-RoCE link, a driver loaded late); ``--require-device`` adds
"the node has an RDMA device (/sys/class/infiniband)" to the rule.  A task
whose environment already sets ``RDMASPAWN`` (to anything, "off" included)
keeps it: the user's choice wins.

The command never fails a job: whatever goes wrong, it exits 0 with nothing
on stdout and one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
from collections.abc import Mapping, Sequence

from .._startup.switch import VARIABLE
from .doctor.facts import kernel_copies_pinned_pages, rdma_core_version, rdma_netlink_copy_on_fork
from .doctor.protection import Protection, VerbsFacts, judge_protection

__all__ = ["Decision", "NodeFacts", "decide", "main", "node_facts"]

#: The line Slurm applies to the task's environment.
EXPORT_LINE = f"export {VARIABLE}=on"

#: Where the kernel lists RDMA devices (one entry per device: mlx5_0, rxe0, ...).
RDMA_DEVICES_DIR = "/sys/class/infiniband"


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What the decision is made from: the doctor's facts about libibverbs and the
    kernel, and the node's RDMA devices."""

    verbs: VerbsFacts
    devices: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether to turn rdmaspawn on for the task, and why (one line)."""

    export: bool
    reason: str


def rdma_devices(directory: str = RDMA_DEVICES_DIR) -> tuple[str, ...]:
    """The node's RDMA devices, none where the directory is missing."""
    try:
        return tuple(sorted(os.listdir(directory)))
    except FileNotFoundError:
        return ()


def node_facts() -> NodeFacts:
    """Gather the facts the doctor judges a node by, for this node.

    libibverbs' own answer (its path and fork status) comes from the C engine,
    as for the doctor; the kernel's answer over RDMA netlink, asked directly.
    """
    from .._native.forkstatus import fork_status

    status = fork_status()
    path = os.path.realpath(status.library) if status.library else None
    cof, note = rdma_netlink_copy_on_fork()
    verbs = VerbsFacts(
        kernel=platform.release(), kernel_copies=kernel_copies_pinned_pages(),
        verbs_path=path, rdma_core=rdma_core_version(path),
        netlink_copy_on_fork=cof, netlink_note=note, fork_status=status.state,
    )
    return NodeFacts(verbs, rdma_devices())


def decide(facts: NodeFacts, env: Mapping[str, str], require_device: bool = False) -> Decision:
    """The rule: export where the doctor says libibverbs marks here (and, with
    ``require_device``, an RDMA device exists), unless the task set RDMASPAWN."""
    if VARIABLE in env:
        return Decision(False, f"the task sets {VARIABLE}={env[VARIABLE]!r} itself: kept")
    protection: Protection = judge_protection(facts.verbs)
    devices = ", ".join(facts.devices) or "none"
    if not protection.marks:
        return Decision(False, f"not affected ({protection.case}; RDMA devices: {devices}): "
                               f"{protection.text}")
    if require_device and not facts.devices:
        return Decision(False, f"affected in principle ({protection.case}) but no RDMA device "
                               f"in {RDMA_DEVICES_DIR} and --require-device was given")
    return Decision(True, f"affected ({protection.case}; RDMA devices: {devices}): "
                          f"{protection.text}")


def _parser() -> argparse.ArgumentParser:
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the export line or nothing; return 0 whatever happens."""
    verbose = False
    try:
        ns = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        verbose = ns.verbose
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
    if verbose:
        sys.stderr.write(f"rdmaspawn taskprolog: {'on' if decision.export else 'left off'}: "
                         f"{decision.reason}\n")
    return 0
