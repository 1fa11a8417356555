"""Processes that /proc hides (hidepid=) are counted and named, not passed over (issue 27, item 10).

A private /proc with ``hidepid=2`` (or 1) is mounted in a new mount namespace
(``unshare -m``), and the doctor runs there as 'nobody' next to a live
process of root's. Before, ``--all`` said "1 processes read ... no process
holds MADV_DONTFORK memory" and ``--pid`` "no process with pid N".
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from typing import Any

import pytest

# Everything imported before dropping to nobody: the interpreter's own files
# may lie where nobody cannot read (/root/.pyenv).
SCAN = textwrap.dedent("""
    import contextlib, io, json, os, shutil, sys
    from rdmaspawn.tools.doctor.cli import main
    with contextlib.redirect_stdout(io.StringIO()):  # what main() imports on first use
        main(["--pid", str(os.getpid()), "--json"])
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
    out = {}
    for name, args in [("all", ["--all"]), ("json", ["--all", "--json"]),
                       ("pid", ["--pid", sys.argv[1]]),
                       ("pid_json", ["--pid", sys.argv[1], "--json"])]:
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = main(args)
        out[name] = {"rc": rc, "out": buf.getvalue(), "err": err.getvalue()}
    print(json.dumps(out))
""")


def _run_hidden(option: str, pid: int, no_cgroups: bool = False) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a private /proc")
    # no_cgroups: an empty tmpfs over /sys/fs/cgroup, so only /proc/loadavg can count
    hide = "mount -t tmpfs none /sys/fs/cgroup && " if no_cgroups else ""
    script = (f"mount --make-rprivate / && mount -t proc -o hidepid={option} proc /proc && "
              f'{hide}exec "$0" -c "$1" "$2"')
    res = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, SCAN, str(pid)],
                         capture_output=True, text=True, timeout=120)
    if res.returncode != 0 and "mount" in res.stderr:
        pytest.skip(f"cannot mount a private /proc here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def roots_process() -> Any:
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE)
    yield p.pid
    p.communicate(b"", timeout=30)


def test_hidepid_2_counts_and_names_the_hidden(roots_process: int) -> None:
    """hidepid=2: --all names the hidden processes (root's among them), says its verdict
    covers only what it read, JSON has hidepid/hidden/hidden_pids/complete; --pid of a
    hidden live process says it is hidden, exit 2, not 'no process'."""
    out = _run_hidden("2", roots_process)
    text = out["all"]["out"]
    assert "hidepid=" in text and "could not be seen" in text, text
    assert "no process holds" not in text and "no process read holds" in text
    assert "Verdict covers only the processes read" in text
    summary = json.loads(out["json"]["out"].splitlines()[-1])
    assert summary["hidepid"] in ("2", "invisible")
    assert roots_process in summary["hidden_pids"] and summary["hidden"] >= 1
    assert summary["complete"] is False and summary["unknown"] >= summary["hidden"]
    assert out["pid"]["rc"] == 2
    assert f"pid {roots_process} is a live process" in out["pid"]["err"]
    assert "no process with pid" not in out["pid"]["err"]
    assert json.loads(out["pid_json"]["out"])["rdmaspawn"] == {"protection": "unknown"}


def test_hidepid_2_without_cgroups_counts_threads(roots_process: int) -> None:
    """hidepid=2 where no cgroup can be read: the kernel's count of threads
    (/proc/loadavg) against those of the processes seen says how many are hidden."""
    out = _run_hidden("2", roots_process, no_cgroups=True)
    summary = json.loads(out["json"]["out"].splitlines()[-1])
    assert summary["hidden"] is None and summary["hidden_pids"] is None
    assert summary["hidden_threads"] >= 1 and summary["complete"] is False
    assert "threads of other processes could not be seen" in out["all"]["out"]
    assert out["pid"]["rc"] == 2 and f"pid {roots_process} is a live process" in out["pid"]["err"]


def test_hidepid_1_counts_them_as_not_readable(roots_process: int) -> None:
    """hidepid=1: the others are listed but unreadable: denied, unknown, none hidden."""
    out = _run_hidden("1", roots_process)
    summary = json.loads(out["json"]["out"].splitlines()[-1])
    assert roots_process in summary["denied_pids"] and summary["hidden"] == 0
    assert summary["complete"] is False
    assert "Verdict covers only the processes read" in out["all"]["out"]
    assert out["pid"]["rc"] == 2 and "not allowed" in out["pid"]["err"]
    assert json.loads(out["pid_json"]["out"])["rdmaspawn"] == {"protection": "unknown"}
