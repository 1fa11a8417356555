"""The rdma-core matrix, as measured by the lane: what fork_status(), fork_init()
and doctor say against what libibverbs really does, in every cell.

Reads RDMASPAWN_RXE_MATRIX (matrix.sh's JSON lines from both kernels, written
in the VMs of .ci/lanes/rxe.sh); skips without it, except under
RDMASPAWN_REQUIRE_RXE=1.  Needs no device itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import matrix_table
import pytest

DOC = Path(os.environ.get("RDMASPAWN_RXE_DOC",
                          Path(__file__).resolve().parents[2] / "docs" / "rdma-core-matrix.md"))
RESULTS = os.environ.get("RDMASPAWN_RXE_MATRIX")
if not RESULTS:
    if os.environ.get("RDMASPAWN_REQUIRE_RXE") == "1":
        pytest.fail("RDMASPAWN_REQUIRE_RXE=1 but RDMASPAWN_RXE_MATRIX is not set", pytrace=False)
    pytest.skip("no matrix run (RDMASPAWN_RXE_MATRIX): .ci/lanes/rxe.sh makes one",
                allow_module_level=True)

CELLS = matrix_table.read(RESULTS.split(os.pathsep))
NO_HAZARD = ("unneeded", "disabled")


def _id(c: dict) -> str:
    return f"{c['suite']}-{matrix_table._kernel(c['kernel'])}-{c['setup']}"


def test_every_cell_measured():
    """Four libibverbs x two kernels x four setups, each measured once."""
    keys = {(c["suite"], matrix_table._kernel(c["kernel"]), c["setup"]) for c in CELLS}
    assert len(keys) == len(CELLS) == 32, sorted(keys)


@pytest.mark.parametrize("cell", CELLS, ids=_id)
def test_fork_status_tells_the_truth(cell):
    """Marked page <=> fork_status() says 'enabled'; never a no-hazard state while
    the library marks (rdma-core 44 on 6.1 answers 'unneeded' and marks); where
    the library cannot say (33), 'unknown' until something shows the state."""
    if cell["dc"]:
        assert cell["fork_status"] == "enabled", cell
    elif cell["ibv_is_fork_initialized"] == "absent":
        # rdma-core 33 cannot say, and nothing is marked yet: "unknown"
        # (after rdmaspawn's own refused ibv_fork_init(): "disabled").
        assert cell["fork_status"] in ("unknown", "disabled"), cell
    else:
        assert cell["fork_status"] in NO_HAZARD, cell


@pytest.mark.parametrize("cell", CELLS, ids=_id)
def test_doctor_verdict(cell):
    """The doctor says HAZARD exactly where the arena's page is marked."""
    assert cell["doctor"] == ("HAZARD" if cell["dc"] else "OK"), cell


@pytest.mark.parametrize("cell", [c for c in CELLS if c["setup"] == "rdmaspawn.fork_init"],
                         ids=_id)
def test_fork_init_marks_only_where_needed(cell):
    """rdmaspawn.fork_init() does not call ibv_fork_init() where libibverbs
    answers 'unneeded', so nothing is marked there; elsewhere it turns marking on."""
    if cell["ibv_is_fork_initialized"] == "unneeded":
        assert cell["fork_init"] == "unneeded" and not cell["dc"], cell
    else:
        assert cell["fork_init"] == "enabled" and cell["dc"], cell


def test_page_matches_the_run():
    """docs/rdma-core-matrix.md is this run's table (regenerate it with matrix_table.py)."""
    assert DOC.read_text() == matrix_table.table(CELLS)


def _rows(suite: str, kernel: str) -> list[dict]:
    return [c for c in CELLS if c["suite"] == suite and c["kernel"] == kernel]


@pytest.mark.parametrize("cell", [c for c in CELLS if c["setup"] == "none"], ids=_id)
def test_doctor_sentence_matches_the_library(cell):
    """The doctor's fork-protection case (its sentence about the machine) says
    whether this libibverbs marks once fork protection is on: 'unneeded' means
    no way of turning it on marks; the marking cases mean RDMAV_FORK_SAFE=1 does."""
    rows = _rows(cell["suite"], cell["kernel"])
    assert len({r["doctor_case"] for r in rows}) == 1, rows
    env = [r for r in rows if r["setup"] == "env"]
    assert len(env) == 1
    if cell["doctor_case"] == "unneeded":
        assert not any(r["dc"] for r in rows), rows
    else:
        assert cell["doctor_case"] in ("verbs-old", "kernel-old", "cannot-ask"), cell
        assert env[0]["dc"], env[0]


@pytest.mark.parametrize("cell", CELLS, ids=_id)
def test_fork_repair_where_the_kernel_allows(cell):
    """rdmaspawn.repair_fork() after the registration: on Linux 6.1 (copy-on-fork
    reported) in force with every release, the page un-marked and the fork()
    child alive; on 5.10 refused, and the mark and the child's fate unchanged."""
    from rdmaspawn.tools.doctor.facts import kernel_copies_pinned_pages

    if kernel_copies_pinned_pages(cell["kernel"]):
        assert (cell["repair"], cell["repaired_dc"], cell["repaired_fork"]) == \
            ("in force", False, "exit 0"), cell
    else:
        assert (cell["repair"], cell["repaired_dc"], cell["repaired_fork"]) == \
            ("refused", cell["dc"], cell["fork"]), cell
