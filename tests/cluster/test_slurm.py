"""rdmaspawn under a real Slurm cluster: srun and sbatch jobs whose ranks hold the hazard.

Run by the Slurm lane (.ci/lanes/slurm.sh), which starts munged, slurmctld
and two slurmd on this machine and sets ``RDMASPAWN_SLURM_LANE`` to its work
directory (``venv/bin/python`` there is what the tasks run).  Elsewhere every
test skips, saying so; the lane fails on any skip.

Each job runs two ranks of tests/cluster/rank.py, one per node, which plant
the DONTFORK hazard through libibverbs and start children four ways:

- the controls (nothing of rdmaspawn in force): an ``os.fork()`` child and a
  ``preexec_fn`` child die with SIGSEGV and a default (fork)
  ``multiprocessing.Pool`` hangs, in every rank, under srun and sbatch;
- ``srun rdmaspawn run -- python rank.py``, ``RDMASPAWN=on`` exported
  before srun, and (tests named ``taskprolog``, run by the lane once it has
  added docs/slurm.md's TaskProlog lines to slurm.conf) the TaskProlog:
  every child runs, the bare ``os.fork()`` is refused with ForkHazardError
  instead of a dead child, and every rank exits 0.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

LANE = os.environ.get("RDMASPAWN_SLURM_LANE")
pytestmark = pytest.mark.skipif(
    not LANE, reason="needs the Slurm cluster that .ci/lanes/slurm.sh starts "
                     "(RDMASPAWN_SLURM_LANE unset)")

RANK = str(Path(__file__).resolve().with_name("rank.py"))
JOB_TIMEOUT = 120

#: What each way gives in a rank with the hazard and nothing of rdmaspawn.
CONTROL = {
    "subprocess": "ok",  # CPython 3.13 uses vfork: the child shares the parent's pages
    "os.fork running Python": "signal SIGSEGV",
    "preexec_fn": "signal SIGSEGV",
    "multiprocessing Pool": "hang",
}
#: ... and with rdmaspawn in force.
PROTECTED = {
    "subprocess": "ok",
    "os.fork running Python": "refused (ForkHazardError)",
    "preexec_fn": "ok",
    "multiprocessing Pool": "ok",
}


def _python() -> str:
    return str(Path(LANE or "").joinpath("venv", "bin", "python"))


def _rdmaspawn() -> str:
    return str(Path(LANE or "").joinpath("venv", "bin", "rdmaspawn"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    env.update(extra)
    return env


def _ranks(output: str) -> list[dict[str, Any]]:
    ranks = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return sorted(ranks, key=lambda r: r["rank"])


def _outcomes(rank: dict[str, Any]) -> dict[str, str]:
    """A rank's ways, a hang's bound left out (its timeout is the lane's choice)."""
    return {k: "hang" if v.startswith("hang") else v for k, v in rank["ways"].items()}


def srun(*command: str, env: dict[str, str]) -> tuple[int, list[dict[str, Any]], str]:
    res = subprocess.run(["srun", "-N2", "-n2", "--ntasks-per-node=1", *command],
                         env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT,
                         check=False)
    return res.returncode, _ranks(res.stdout), res.stdout + res.stderr


def sbatch(step: str, tmp_path: Path, env: dict[str, str]) -> tuple[int, list[dict[str, Any]], str]:
    """``sbatch --wait`` of a two-node batch script whose one line is ``srun STEP``."""
    out = tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH -N2 -n2 --ntasks-per-node=1\nsrun {step}\n")
    res = subprocess.run(["sbatch", "--wait", "-o", str(out), str(script)], env=env,
                         capture_output=True, text=True, timeout=JOB_TIMEOUT, check=False)
    text = out.read_text() if out.exists() else ""
    return res.returncode, _ranks(text), res.stdout + res.stderr + text


def _check(result: tuple[int, list[dict[str, Any]], str], want: dict[str, str],
           ok: bool, rdmaspawn: str | None = None) -> None:
    rc, ranks, output = result
    assert [r["rank"] for r in ranks] == [0, 1], output
    assert {r["node"] for r in ranks} == {"n1", "n2"}, output
    for r in ranks:
        assert r["hazard"] == "verbs", output
        assert _outcomes(r) == want, output
        if rdmaspawn is not None:
            assert r["rdmaspawn"] == rdmaspawn, output
    assert (rc == 0) is ok, output


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    # slurmd's tasks write the batch output here: make it reachable by them.
    os.chmod(tmp_path, 0o755)
    return tmp_path


def test_control_srun_crashes() -> None:
    """srun -n2 with nothing of rdmaspawn: fork and preexec_fn children die, the Pool hangs."""
    _check(srun(_python(), RANK, env=_env()), CONTROL, ok=False)


def test_control_sbatch_crashes(job_dir: Path) -> None:
    _check(sbatch(f"{_python()} {RANK}", job_dir, _env()), CONTROL, ok=False)


def test_rdmaspawn_run_srun() -> None:
    """srun rdmaspawn run -- python rank.py: every rank exits 0."""
    _check(srun(_rdmaspawn(), "run", "--", _python(), RANK, env=_env()), PROTECTED, ok=True)


def test_rdmaspawn_run_sbatch(job_dir: Path) -> None:
    _check(sbatch(f"{_rdmaspawn()} run -- {_python()} {RANK}", job_dir, _env()),
           PROTECTED, ok=True)


def test_exported_on_srun() -> None:
    """RDMASPAWN=on exported before srun reaches every task."""
    _check(srun(_python(), RANK, env=_env(RDMASPAWN="on")), PROTECTED, ok=True, rdmaspawn="on")


def test_exported_on_sbatch(job_dir: Path) -> None:
    _check(sbatch(f"{_python()} {RANK}", job_dir, _env(RDMASPAWN="on")), PROTECTED, ok=True,
           rdmaspawn="on")


# The lane runs these once slurm.conf has docs/slurm.md's TaskProlog line.

def test_taskprolog_srun() -> None:
    """A plain srun on a cluster with the TaskProlog: rdmaspawn is on in every task."""
    _check(srun(_python(), RANK, env=_env()), PROTECTED, ok=True, rdmaspawn="on")


def test_taskprolog_sbatch(job_dir: Path) -> None:
    _check(sbatch(f"{_python()} {RANK}", job_dir, _env()), PROTECTED, ok=True, rdmaspawn="on")


def test_taskprolog_keeps_the_users_off() -> None:
    """A job that exports RDMASPAWN=off keeps it under the TaskProlog: the control again."""
    _check(srun(_python(), RANK, env=_env(RDMASPAWN="off")), CONTROL, ok=False, rdmaspawn="off")
