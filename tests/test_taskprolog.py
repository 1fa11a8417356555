"""``rdmaspawn taskprolog``: the doctor's rule decides, the user's RDMASPAWN wins, a job never fails.

The decision is a function of the node's facts (:class:`NodeFacts`), so each
case of the doctor's table is tried here with facts built for it: no RDMA
hardware is needed.  The command itself runs for real on this machine.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from rdmaspawn.tools import taskprolog
from rdmaspawn.tools.doctor.protection import VerbsFacts
from rdmaspawn.tools.taskprolog import EXPORT_LINE, NodeFacts, decide

VERBS = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"


def facts(kernel_copies: bool | None = True, verbs_path: str | None = VERBS,
          rdma_core: int | None = 44, netlink: bool | None = None,
          fork_status: str | None = "disabled", devices: tuple[str, ...] = ()) -> NodeFacts:
    return NodeFacts(VerbsFacts(kernel="6.1.0", kernel_copies=kernel_copies,
                                verbs_path=verbs_path, rdma_core=rdma_core,
                                netlink_copy_on_fork=netlink, netlink_note="ib_core not loaded",
                                fork_status=fork_status), devices)


@pytest.mark.parametrize("case, node, export", [
    ("no-verbs", facts(verbs_path=None, rdma_core=None, fork_status="unavailable"), False),
    ("kernel-old", facts(kernel_copies=False, rdma_core=33), True),
    ("kernel-old (netlink says no)", facts(netlink=False, rdma_core=56), True),
    ("verbs-old", facts(rdma_core=44), True),
    ("unneeded", facts(rdma_core=56, netlink=True, fork_status="unneeded"), False),
    ("cannot-ask", facts(rdma_core=56, netlink=None), True),
])
def test_the_doctors_cases_decide(case: str, node: NodeFacts, export: bool) -> None:
    """Exported exactly where the doctor says libibverbs marks registrations DONTFORK."""
    decision = decide(node, {})
    assert decision.export is export, (case, decision.reason)
    assert decision.reason.startswith("affected" if export else "not affected")


@pytest.mark.parametrize("value", ["off", "on", ""])
def test_the_tasks_own_setting_is_kept(value: str) -> None:
    """A task that sets RDMASPAWN itself (even to off) is left alone on an affected node."""
    decision = decide(facts(), {"RDMASPAWN": value})
    assert not decision.export
    assert "itself" in decision.reason


def test_require_device() -> None:
    """--require-device: an affected node without an RDMA device is left off; with one, on."""
    assert decide(facts(), {}, require_device=False).export
    assert not decide(facts(), {}, require_device=True).export
    assert decide(facts(devices=("rxe0",)), {}, require_device=True).export


def test_an_error_never_fails_the_job(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Facts that cannot be gathered: exit 0, nothing on stdout, one line on stderr."""
    def broken() -> NodeFacts:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(taskprolog, "node_facts", broken)
    monkeypatch.delenv("RDMASPAWN", raising=False)
    assert taskprolog.main([]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "left off" in err and "Input/output error" in err


def test_bad_options_never_fail_the_job() -> None:
    res = subprocess.run([sys.executable, "-m", "rdmaspawn", "taskprolog", "--no-such-option"],
                         capture_output=True, text=True, check=False)
    assert (res.returncode, res.stdout) == (0, "")
    assert "left off" in res.stderr


def _run(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "rdmaspawn", "taskprolog"], env=env,
                          capture_output=True, text=True, check=False)


def test_the_command_agrees_with_the_doctor_here() -> None:
    """On this machine the command prints the export line exactly where the doctor's
    own report says libibverbs marks (one rule, not two)."""
    # The doctor in a fresh interpreter too: this one's libibverbs state may
    # have been changed by other tests.
    code = "from rdmaspawn.tools.doctor import doctor; print(doctor().fork_protection.marks)"
    marks = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip() == "True"
    res = _run({})
    assert res.returncode == 0
    assert res.stdout == (EXPORT_LINE + "\n" if marks else "")
    assert _run({"RDMASPAWN": "off"}).stdout == ""


def _doc_script(prefix: str) -> str:
    """docs/slurm.md's TaskProlog script, its /opt/rdmaspawn/ replaced by ``prefix``."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "slurm.md").read_text()
    block = doc.split("<!-- slurm-lane: rdmaspawn-taskprolog -->", 1)[1]
    body = block.split("```", 2)[1].split("\n", 1)[1]
    return body.replace("/opt/rdmaspawn/", prefix)


@pytest.mark.parametrize("installed", [True, False])
def test_the_documented_script(installed: bool) -> None:
    """The script docs/slurm.md tells administrators to install prints what the
    command prints, and exits 0 with nothing on stdout where rdmaspawn is missing."""
    import os

    prefix = os.path.dirname(os.path.dirname(sys.executable)) + "/" if installed \
        else "/nonexistent/rdmaspawn/"
    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    res = subprocess.run(["sh", "-c", _doc_script(prefix)], env=env, capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout == (_run({}).stdout if installed else ""), res.stderr
