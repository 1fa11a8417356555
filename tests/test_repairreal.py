"""``repaircost --real``'s table, and its refusal to run without a device.

The measurements themselves need a real RDMA device: tests/realdevice/bench_vm.sh
runs them in the soft-RoCE VM. Here: the table says "refused" where
``repair_fork()`` refused (Linux 5.10), and the mode ends in one line, not a
traceback, where there is nothing to register on.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rdmaspawn.bench.repairreal import render, render_vmas


def _variant(ms: float, rss: float, dc: float) -> dict[str, object]:
    return {"fork_ms": ms, "child_rss_mib": rss, "dc_mib": dc, "device": "rxe0", "forks_ms": [ms]}


def test_the_table_has_a_row_per_size_and_says_refused() -> None:
    rows = [
        {"size_mib": 64.0, "refused": None,
         "variants": {"marked": _variant(10.0, 7, 64), "repaired": _variant(20.0, 71, 0),
                      "unmarked": _variant(170.0, 71, 0)}},
        {"size_mib": 512.0, "refused": "the kernel does not say it copies",
         "variants": {"marked": _variant(10.0, 7, 512), "unmarked": _variant(900.0, 519, 0)}},
    ]
    lines = render(rows, ("marked", "repaired", "unmarked"))
    assert lines[2] == ("| 64 MiB | 10.00 ms | 20.00 ms | 170.00 ms | 2.00x "
                        "| 7 MiB | 71 MiB | 71 MiB | 64 / 0 / 0 |")
    assert lines[3] == ("| 512 MiB | 10.00 ms | refused | 900.00 ms | - "
                        "| 7 MiB | refused | 519 MiB | 512 / refused / 0 |")
    assert lines[-1] == "\nrepair_fork() refused: the kernel does not say it copies"
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")


def test_the_swept_variant_gets_its_own_columns() -> None:
    row = {"size_mib": 1.0, "refused": None,
           "variants": {"marked": _variant(10.0, 7, 1), "swept": _variant(30.0, 8, 1)}}
    lines = render([row], ("marked", "swept"))
    assert lines[0] == ("| registered | marked fork | swept fork | swept / marked "
                        "| child RSS marked | swept | dc MiB marked / swept |")
    assert lines[2] == "| 1 MiB | 10.00 ms | 30.00 ms | 3.00x | 7 MiB | 8 MiB | 1 / 1 |"


def test_the_mappings_table_pairs_the_counts() -> None:
    counts = {"stock": [(0, 150), (1000, 160)], "repaired": [(0, 220), (1000, 221)]}
    result = {"cycles": 1000, "large_mib": 8, "large_every": 1, "window": 16, "variants": {
        k: {"device": "rxe0", "counts": c, "mappings": c[-1][1], "seconds": 1.0}
        for k, c in counts.items()}}
    lines = render_vmas(result)
    assert "| 1,000 | 160 | 221 |" in lines and "| end | 160 | 221 |" in lines


@pytest.mark.skipif(os.path.exists("/sys/class/infiniband"), reason="an RDMA device is here")
def test_real_without_a_device_says_so_in_one_line() -> None:
    res = subprocess.run([sys.executable, "-m", "rdmaspawn.bench.repaircost", "--real",
                          "--sizes", "0", "--rounds", "1"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert "repaircost --real: the marked worker (0 bytes) exited" in res.stderr
