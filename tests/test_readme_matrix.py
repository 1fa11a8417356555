"""The README's "Am I affected?" table agrees with the rdma-core matrix measured on a device.

docs/rdma-core-matrix.md is written by the real-device lane (.ci/lanes/rxe.sh,
tests/realdevice/) and checked against each run there. The README's table
says, per rdma-core range and kind of kernel, whether libibverbs marks
registrations MADV_DONTFORK once fork protection is on. Every measured cell
(a release, a kernel, protection turned on by RDMAV_FORK_SAFE=1 or
ibv_fork_init()) must fall in a README row that says what was measured: "dc"
and a dying fork() child where it says hazard, neither where it does not.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TURNED_ON = ("`RDMAV_FORK_SAFE=1`", "`ibv_fork_init()`")
# The matrix's kernels, by the README column they stand for.
COPY_ON_FORK_KERNEL, OLD_KERNEL = "6.1", "5.10"


def _readme_rows() -> list[tuple[int, int, bool, bool]]:
    """(first, last rdma-core release, hazard on a copy-on-fork kernel, on an old one)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Am I affected?"):]
    rows = []
    for line in section.splitlines():
        m = re.match(r"\s*\| (up to (\d+)|(\d+) to (\d+)|(\d+) and newer) \|(.*)\|(.*)\|$", line)
        if not m:
            continue
        first = int(m.group(3) or m.group(5) or 0)
        last = int(m.group(2) or m.group(4) or 10**6)
        rows.append((first, last, "**hazard**" in m.group(6), "**hazard**" in m.group(7)))
    assert len(rows) == 3, section[:2000]
    return rows


def _measured() -> list[tuple[str, int, str, bool, bool]]:
    """(kernel, rdma-core major, turned on by, page dc, fork() child died) per cell."""
    cells, kernel = [], None
    for line in (ROOT / "docs" / "rdma-core-matrix.md").read_text().splitlines():
        heading = re.match(r"## Linux (\S+)", line)
        if heading:
            kernel = heading.group(1)
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if kernel is None or len(cols) != 10 or not re.match(r"\d+\.\d+ ", cols[0]):
            continue
        if cols[1] in TURNED_ON:
            cells.append((kernel, int(cols[0].split(".")[0]), cols[1], cols[4] == "yes",
                          cols[5].startswith("signal")))
    return cells


def test_readme_table_says_what_the_device_measured() -> None:
    rows = _readme_rows()
    cells = _measured()
    assert {k for k, *_ in cells} == {COPY_ON_FORK_KERNEL, OLD_KERNEL}
    assert len(cells) >= 2 * 2 * 4, cells  # two kernels, two ways, four releases
    for kernel, major, way, dc, died in cells:
        (row,) = [r for r in rows if r[0] <= major <= r[1]]
        says_hazard = row[2] if kernel == COPY_ON_FORK_KERNEL else row[3]
        assert (dc, died) == (says_hazard, says_hazard), (kernel, major, way, row)
