""".ci/lanes/lane_lib.sh, what the arm64 and sid lanes share.

wait_for_wheel takes a wheel only once it reads as a whole zip (the sid
lane used to take whatever name appeared, while build-wheels was still
copying it in); closing_lines prints a log's summary or its tail.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / ".ci" / "lanes" / "lane_lib.sh"
GLOB = "rdmaspawn-*-manylinux_2_28_x86_64.whl"


def lib(call: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f". '{LIB}'; {call}"], capture_output=True,
                          text=True, timeout=60, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})


def test_wait_for_wheel_takes_only_a_whole_zip(tmp_path):
    assert lib(f"wait_for_wheel '{tmp_path}' '{GLOB}' 0").returncode == 1
    wheel = tmp_path / "rdmaspawn-0.1.0-cp39-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("rdmaspawn/__init__.py", "x = 1\n" * 1000)
    whole = wheel.read_bytes()
    wheel.write_bytes(whole[: len(whole) // 2])  # still being copied in
    res = lib(f"wait_for_wheel '{tmp_path}' '{GLOB}' 0")
    assert (res.returncode, res.stdout) == (1, ""), res
    wheel.write_bytes(whole)
    res = lib(f"wait_for_wheel '{tmp_path}' '{GLOB}' 0")
    assert (res.returncode, res.stdout) == (0, f"{wheel}\n"), res


def test_closing_lines_from_the_summary_else_the_tail(tmp_path):
    log = tmp_path / "log"
    log.write_text("a\nb\n== short test summary info ==\nFAILED x\n== 1 failed ==\n")
    res = lib(f"closing_lines '{log}' '= short test summary info =' 1")
    assert res.stdout == "== short test summary info ==\nFAILED x\n== 1 failed ==\n"
    log.write_text("a\nb\nc\n")
    assert lib(f"closing_lines '{log}' '= short test summary info =' 2").stdout == "b\nc\n"
    assert lib(f"closing_lines '{tmp_path}/none' x 2").stdout == ""
