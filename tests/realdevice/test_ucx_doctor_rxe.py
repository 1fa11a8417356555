"""What the doctor says of an Open MPI + UCX rank on the soft-RoCE device
(issue 28, item 3): ``rdmaspawn doctor --pid PID --json`` of a rank that has
swapped 1 MiB buffers over rxe0 through UCX (ucx_doctor_rank.py), with UCX's
defaults, with its purge on fork off (UCX_RCACHE_PURGE_ON_FORK=n), and with
UCX's defaults in ranks started under RDMASPAWN=on (exported by mpirun, or
inherited from `rdmaspawn run` around the whole mpirun).

Runs in the soft-RoCE VM of .ci/lanes/rxe.sh (Linux 6.1, rdma-core 44) on
Debian's CPython in a venv that sees Debian's python3-mpi4py; elsewhere it
skips (fails under RDMASPAWN_REQUIRE_RXE=1 with RDMASPAWN_REQUIRE_UCX=1).
The doctor's JSON fields are recorded (record.py); the test holds it to what
docs/doctor-and-guard.md says: UCX loaded, its fork_init setting, its purge
as set, a rank that nothing protects called "not protected" and one under
RDMASPAWN=on "protected", by the patch at least (both ways of setting it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpistack import require_mpi_stack
from record import record

RANK = str(Path(__file__).resolve().parent / "ucx_doctor_rank.py")
# Open MPI 4.1's pml ucx takes only mlx devices unless told "any".
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
          "--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any",
          "--mca", "pml_ucx_devices", "any"]
UCX = {"UCX_TLS": "rc_verbs,ud_verbs,self", "UCX_NET_DEVICES": "rxe0:1",
       "UCX_IB_GID_INDEX": "0"}
SETTINGS = {"defaults": {}, "purge off": {"UCX_RCACHE_PURGE_ON_FORK": "n"},
            "RDMASPAWN=on": {"RDMASPAWN": "on"}, "mpirun under rdmaspawn run": {}}
# The whole mpirun under `rdmaspawn run`: the ranks inherit its RDMASPAWN.
PREFIX = {"mpirun under rdmaspawn run": [sys.executable, "-m", "rdmaspawn", "run", "--"]}


require_mpi_stack()


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_doctor_of_a_ucx_rank(setting: str) -> None:
    extra = SETTINGS[setting]
    exports = [a for n in sorted({*UCX, *extra}) for a in ("-x", n)]
    r = subprocess.run([*PREFIX.get(setting, []), *MPIRUN, *exports, sys.executable, RANK],
                       env={**os.environ, **UCX, **extra}, capture_output=True, text=True,
                       timeout=900)
    ranks = sorted((json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")),
                   key=lambda x: x["rank"])
    name = setting.replace(" ", "-").replace("=", "-")
    record(f"ucx-doctor-{name}", {"ranks": ranks})
    assert r.returncode == 0 and len(ranks) == 2, (r.returncode, r.stdout[-3000:],
                                                   r.stderr[-3000:])
    for x in ranks:
        assert x["moved"] >= 1 << 20, x
        assert x["doctor_exit"] in (0, 1), x   # 1: a HAZARD verdict, still a report
        assert x["ucx"]["loaded"] is True, x
        assert x["ucx"]["fork_init"] == "try (default)", x
        assert x["ucx"]["purge_on_fork"] is (setting != "purge off"), x
        if "RDMASPAWN" in extra or setting in PREFIX:
            assert x["rdmaspawn"]["protection"] == "protected", x
            assert "patch" in x["rdmaspawn"]["protected_by"], x
        else:
            assert x["rdmaspawn"]["protection"] == "not protected", x
