"""rdmaspawn doctor: verdicts on real processes, the CLI's exit statuses and messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, List

import pytest

from rdmaspawn.tools.doctor import doctor


# A child interpreter that optionally plants the real hazard (over a malloc
# arena), prints its pid and what was planted, and waits.
_WAITER = textwrap.dedent("""
    import json, os, sys
    info = {"pid": os.getpid()}
    if %(plant)r:
        from rdmaspawn.testing.hazard import plant
        h = plant(%(plant)r)
        info.update(start=h.start, length=h.length, method=h.method)
    print(json.dumps(info), flush=True)
    sys.stdin.readline()
""")


class Waiter:
    def __init__(self, plant: Any = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _WAITER % {"plant": plant}],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     )
        assert self.proc.stdout is not None
        self.info: Dict[str, Any] = json.loads(self.proc.stdout.readline())
        self.pid: int = self.info["pid"]

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.communicate("\n", timeout=30)


def cli(*args: str, python: str = sys.executable, prefix: List[str] = ()) -> subprocess.CompletedProcess:  # type: ignore[assignment]
    return subprocess.run([*prefix, python, "-m", "rdmaspawn", "doctor", *args],
                          capture_output=True, text=True, timeout=60)


def test_clean_process_is_ok() -> None:
    """A fresh interpreter holds no DONTFORK memory: OK, exit 0, JSON says the same."""
    r = cli()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Verdict: OK" in r.stdout
    j = cli("--json")
    data = json.loads(j.stdout)
    assert j.returncode == 0 and data["verdict"] == "OK" and data["findings"] == []
    assert data["is_self"] is True and data["mp_default_start_method"]
    assert set(data["environment"]) >= {"RDMAV_FORK_SAFE", "IBV_FORK_SAFE", "RDMAV_HUGEPAGES_SAFE",
                                         "FI_EFA_FORK_SAFE", "UCX_IB_FORK_INIT"}


def test_clean_other_pid_is_ok() -> None:
    """Another clean process, by pid: OK, not 'self'."""
    with Waiter() as w:
        report = doctor(w.pid)
        assert report.ok and not report.is_self and report.pid == w.pid
        r = cli("--pid", str(w.pid))
        assert r.returncode == 0, r.stdout + r.stderr


def test_planted_hazard_in_other_process_is_named() -> None:
    """The arena page planted in another process is reported as HAZARD with its address, exit 1."""
    with Waiter(plant="madvise") as w:
        start = w.info["start"]
        report = doctor(w.pid)
        assert report.verdict == "HAZARD"
        hit = [f for f in report.findings if f.mapping.start <= start < f.mapping.end]
        assert hit and hit[0].kind == "arena" and hit[0].risk == "high"
        r = cli("--pid", str(w.pid))
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Verdict: HAZARD" in r.stdout and ("0x%x" % hit[0].mapping.start) in r.stdout
        j = json.loads(cli("--pid", str(w.pid), "--json").stdout)
        assert j["verdict"] == "HAZARD"
        assert any(int(f["start"], 16) <= start < int(f["end"], 16) for f in j["findings"])


def test_planted_hazard_in_self() -> None:
    """Inside the hazardous process the doctor also knows libibverbs' fork status and the advice fits."""
    code = textwrap.dedent("""
        import json
        from rdmaspawn.testing.hazard import plant
        h = plant("auto")
        from rdmaspawn.tools.doctor import doctor
        r = doctor()
        print(json.dumps({"verdict": r.verdict, "fork_status": r.fork_status, "method": h.method,
                          "verbs": r.verbs_loaded, "advice": r.advice, "exit": r.exit_code}))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["verdict"] == "HAZARD" and d["exit"] == 1
    assert any("rdmaspawn.patch()" in a for a in d["advice"])
    if d["method"] == "verbs":
        assert d["verbs"] and d["fork_status"] == "enabled"


def test_no_such_pid_exits_2_without_traceback() -> None:
    """A pid that does not exist: exit 2 and one clear line, no traceback."""
    p = subprocess.Popen(["true"])
    p.wait()
    r = cli("--pid", str(p.pid))
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.strip() == "rdmaspawn doctor: no process with pid %d" % p.pid
    with pytest.raises(ProcessLookupError):
        doctor(p.pid)


def test_unreadable_pid_exits_2_without_traceback() -> None:
    """A process the caller may not inspect: exit 2, one line naming the permission problem.

    Root may read every process, so a root run drops to 'nobody' inside the
    child interpreter (after importing rdmaspawn, so nothing needs to be
    readable by nobody) and inspects a process of root's; a non-root run
    inspects pid 1.
    """
    code = textwrap.dedent("""
        import contextlib, io, os, sys
        from rdmaspawn.tools.doctor import main
        # One run as we are, so that everything the CLI imports lazily is
        # loaded while the interpreter's files (under /root for pyenv) are
        # still readable.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["--pid", str(os.getpid())])
        if os.geteuid() == 0:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
        sys.exit(main(["--pid", sys.argv[1]]))
    """)
    with Waiter() as w:
        target = w.pid if os.geteuid() == 0 else 1
        r = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("rdmaspawn doctor: not allowed to read"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1