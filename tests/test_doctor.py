"""rdmaspawn doctor: verdicts on real processes, the CLI's exit statuses and messages."""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from helpers.hazard import DROP_CAPS, Holder, require_verbs, shm_file, verbs_file

from rdmaspawn.tools.doctor import doctor, scan_node
from rdmaspawn.tools.doctor.protection import VerbsFacts, judge_protection


def cli(*args: str, python: str = sys.executable, prefix: list[str] = ()) -> subprocess.CompletedProcess:  # type: ignore[assignment]
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
    with Holder() as w:
        report = doctor(w.pid)
        assert report.ok and not report.is_self and report.pid == w.pid
        r = cli("--pid", str(w.pid))
        assert r.returncode == 0, r.stdout + r.stderr


def test_planted_hazard_in_other_process_is_named() -> None:
    """The arena page planted in another process is reported as HAZARD with its address, exit 1."""
    with Holder(plant="madvise") as w:
        start = w.info["hazard"]["start"]
        report = doctor(w.pid)
        assert report.verdict == "HAZARD"
        hit = [f for f in report.findings if f.mapping.start <= start < f.mapping.end]
        assert hit and hit[0].kind == "arena" and hit[0].risk == "high"
        r = cli("--pid", str(w.pid))
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Verdict: HAZARD" in r.stdout and (f"0x{hit[0].mapping.start:x}") in r.stdout
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
    assert r.stderr.strip() == f"rdmaspawn doctor: no process with pid {p.pid}"
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
    with Holder() as w:
        target = w.pid if os.geteuid() == 0 else 1
        r = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("rdmaspawn doctor: not allowed to read"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

def test_shm_mapping_is_its_own_kind() -> None:
    """A DONTFORK page of POSIX shared memory (/dev/shm) is classified 'shm', low risk, and
    still makes the verdict HAZARD (a fork() child that touches it crashes)."""
    path = shm_file("rdmaspawn-doctor")
    try:
        with Holder(files=[path]) as h:
            report = doctor(h.pid)
            [f] = report.findings
            assert (f.kind, f.risk, f.mapping.start) == ("shm", "low", h.info["marked"][path])
            assert path in f.note and report.verdict == "HAZARD"
    finally:
        os.unlink(path)


# -- fork protection in words (issue 12) ------------------------------------------

def _this_machine() -> dict[str, Any]:
    """The facts of this machine, found without the doctor's code."""
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20).close()
        netlink = "available"
    except OSError as e:
        netlink = "unsupported" if e.errno == errno.EPROTONOSUPPORT else "error"
    verbs = verbs_file()
    release = os.uname().release
    return {"kernel": tuple(int(x) for x in release.split(".")[:2]), "release": release,
            "netlink": netlink, "verbs": verbs}


def test_wording_on_this_machine() -> None:
    """On this machine (Linux >= 5.13, rdma-core 44, ib_core not loaded) the doctor says in
    one sentence that the kernel copies pinned pages but libibverbs 44 marks anyway, instead of
    'copies DMA-pinned pages on fork: yes' next to 'fork status: disabled'."""
    m = _this_machine()
    if not (m["kernel"] >= (5, 13) and m["netlink"] == "unsupported" and m["verbs"]
            and m["verbs"].endswith(".44.0")):
        pytest.skip(f"pinned for Linux >= 5.13, libibverbs 44, no ib_core; here: {m}")
    r = cli()
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "copies DMA-pinned pages on fork: yes" not in text
    expected = (
        f"Fork protection: this kernel ({m['release']}) copies DMA-pinned pages at fork, but "
        "the libibverbs of rdma-core 44 marks registrations DONTFORK anyway once "
        "ibv_fork_init() has run: upgrade rdma-core to 51 or later to remove the hazard at its "
        "root; until then start children with rdmaspawn\n")
    assert expected in text
    assert f"the system's is {os.path.realpath(m['verbs'])}, rdma-core 44" in text
    data = json.loads(cli("--json").stdout)
    assert data["fork_protection"]["case"] == "verbs-old"
    assert data["rdma_core"] == 44 and data["kernel_copies_pinned_pages"] is True


def test_wording_in_a_process_that_marks() -> None:
    """In a process whose libibverbs armed fork protection (plant('verbs')), the advice names
    the situation and what removes it, after the usual rdmaspawn advice."""
    require_verbs()
    with Holder(plant="verbs") as h:
        report = doctor(h.pid)
    assert report.verbs_loaded and report.rdma_core is not None
    assert report.fork_protection.marks
    assert report.advice[-1] == ("to remove the cause rather than dodge it, see 'Fork "
                                 f"protection' above (case '{report.fork_protection.case}')")
    assert f"Fork protection: {report.fork_protection.text}\n" in report.to_text()


_FACTS = dict(kernel="6.8.0", kernel_copies=True, verbs_path="/usr/lib/libibverbs.so.1.14.51.0",
              rdma_core=51, netlink_copy_on_fork=True, netlink_note="RDMA netlink answered")


@pytest.mark.parametrize("change,case,marks,words", [
    ({}, "unneeded", False, "libibverbs marks nothing (fork status 'unneeded')"),
    ({"fork_status": "unneeded", "netlink_copy_on_fork": None}, "unneeded", False, "asked it"),
    ({"rdma_core": 44, "fork_status": "unneeded"}, "verbs-old", True,
     "rdma-core 44 marks registrations DONTFORK anyway"),
    ({"kernel": "5.4.0", "kernel_copies": False, "netlink_copy_on_fork": False}, "kernel-old",
     True, "does not copy DMA-pinned pages at fork"),
    ({"rdma_core": 28}, "verbs-old", True, "upgrade rdma-core to 51 or later"),
    ({"netlink_copy_on_fork": None, "netlink_note": "RDMA netlink is unavailable: ib_core is "
      "not loaded"}, "cannot-ask", True, "but cannot here (RDMA netlink is unavailable"),
    ({"verbs_path": None, "rdma_core": None}, "no-verbs", False, "libibverbs is not installed"),
])
def test_every_protection_case(change: dict[str, Any], case: str, marks: bool,
                               words: str) -> None:
    """Each row of protection's table: the case chosen, whether libibverbs marks, the words."""
    p = judge_protection(VerbsFacts(**{**_FACTS, **change}))  # type: ignore[arg-type]
    assert (p.case, p.marks) == (case, marks)
    assert words in p.text
    assert ("until then start children with rdmaspawn" in p.text) == marks


def test_unreadable_as_root_says_why() -> None:
    """As root without CAP_SYS_PTRACE (a real capset(), as in a container), reading another
    user's process fails with EACCES; the doctor says that, not 'run as root'."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the message is for root without CAP_SYS_PTRACE")
    code = DROP_CAPS + textwrap.dedent("""
        import os, sys
        from rdmaspawn._host.procfs import read_proc
        from rdmaspawn.tools.doctor import main
        drop_capabilities()
        assert os.geteuid() == 0
        try:
            read_proc(int(sys.argv[1]), "smaps")
        except PermissionError as e:
            print("errno", e.errno, file=sys.stderr)
        sys.exit(main(["--pid", sys.argv[1]]))
    """)
    with Holder(uid=65534) as h:
        r = subprocess.run([sys.executable, "-c", code, str(h.pid)], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"errno {errno.EACCES}"
    assert lines[1].startswith(f"rdmaspawn doctor: not allowed to read the memory map of pid "
                               f"{h.pid}: running as root, but without CAP_SYS_PTRACE")
    assert "or as root" not in lines[1] and len(lines) == 2


# -- doctor --all (issue 11) --------------------------------------------------------

def test_scan_reports_hazard_skips_clean_counts_vanished() -> None:
    """scan_node() over a planted process, a clean one and one that exits during the scan.

    The exiting one is real: the pid list is a generator that kills and reaps
    that process right before handing out its pid, so the scan meets a pid
    that was alive when listed and is gone when read.  (It pins how a gone
    pid is counted, not the timing of a race inside one read.)
    """
    with Holder(plant="madvise", engine=True) as bad, Holder() as clean:
        victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

        def pids() -> Any:
            yield bad.pid
            yield clean.pid
            victim.kill()
            victim.wait()
            yield victim.pid

        scan = scan_node(pids())
    assert scan.scanned == 2 and scan.vanished == [victim.pid] and scan.denied == []
    [entry] = scan.entries
    assert entry.pid == bad.pid and entry.hazardous
    assert "_rdmaspawn_cffi" in (entry.engine or "")
    assert entry.overlaps().startswith("arena (high)")
    assert entry.command.startswith(sys.executable)
    assert scan.exit_code == 1


def test_all_cli_text_and_json_lines() -> None:
    """`doctor --all`: each process holding DONTFORK memory named with what that memory
    overlaps and whether rdmaspawn's engine is mapped there; a clean one left out; a summary;
    exit 1.  --json gives one object per line, each with the host."""
    path = shm_file("rdmaspawn-all")
    try:
        with Holder(plant="madvise") as bad, Holder(files=[path]) as shm, Holder() as clean:
            text = cli("--all")
            lines = cli("--all", "--json")
    finally:
        os.unlink(path)
    assert text.returncode == 1, text.stdout + text.stderr
    out = text.stdout
    assert (f"pid {bad.pid:<7} HAZARD    {sys.executable} -c " in out)
    assert ("DONTFORK over: arena (high); rdmaspawn engine loaded, not protected"
            ) in out.split(f"pid {bad.pid:<7}")[1].splitlines()[1]
    assert "DONTFORK over: shm (low); rdmaspawn not loaded, not protected" in \
        out.split(f"pid {shm.pid:<7}")[1].splitlines()[1]
    assert f"pid {clean.pid:<7}" not in out
    assert any(line.endswith("not readable by this user") for line in out.splitlines())
    assert lines.returncode == 1
    objs = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len({o["host"] for o in objs}) == 1
    by_pid = {o.get("pid"): o for o in objs}
    assert by_pid[bad.pid]["hazardous"] is True
    assert "_rdmaspawn_cffi" in by_pid[bad.pid]["rdmaspawn"]["engine"]
    assert by_pid[bad.pid]["rdmaspawn"]["patched"] is False
    assert by_pid[bad.pid]["verdict"] == "HAZARD"
    assert any(f["kind"] == "arena" for f in by_pid[bad.pid]["overlaps"])
    assert by_pid[shm.pid]["rdmaspawn"] == {
        "engine": None, "protection": "not protected", "protected_by": [], "patched": False,
        "guarded": None, "repaired": False, "unprotected": None}
    assert clean.pid not in by_pid
    summary = objs[-1]
    assert summary["type"] == "summary" and summary["hazardous"] >= 2
    assert summary["scanned"] >= 3


def test_all_as_nobody_counts_denied() -> None:
    """Run as 'nobody', the scan cannot read root's planted process: it is counted as denied,
    not reported, and not fatal."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a scan as nobody next to a root process")
    code = textwrap.dedent("""
        import json, os, sys
        from rdmaspawn.tools.doctor import scan_node
        os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
        scan = scan_node()
        print(json.dumps(scan.summary()))
        print(json.dumps([e.pid for e in scan.entries]))
    """)
    with Holder(plant="madvise") as bad:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 0, r.stderr
    summary_line, entries_line = r.stdout.splitlines()
    summary, entries = json.loads(summary_line), json.loads(entries_line)
    assert bad.pid in summary["denied_pids"] and bad.pid not in entries
    assert summary["scanned"] >= 1  # at least itself


def _nl_reply(attrs: list[tuple[int, bytes]], kind: int = 5126) -> bytes:
    body = b"".join(struct.pack("=HH", 4 + len(v), t) + v + b"\0" * (-len(v) % 4)
                    for t, v in attrs)
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 1, 0) + body


def test_rdma_netlink_reply_parsing() -> None:
    """The SYS_GET reply as rdma/rdma_netlink.h lays it out: the copy-on-fork u8 (attribute
    93) read among others; absent means an older kernel; an error message is named.

    The bytes are built here from the uapi layout: this machine has no ib_core, so no
    real reply can be had (see the report)."""
    from rdmaspawn._host.rdmanetlink import _copy_on_fork_attribute

    assert _copy_on_fork_attribute(_nl_reply([(70, b"\x01"), (93, b"\x01")]))[0] is True
    assert _copy_on_fork_attribute(_nl_reply([(93, b"\x00")]))[0] is False
    absent = _copy_on_fork_attribute(_nl_reply([(70, b"\x01")]))
    assert absent[0] is False and "kernel < 5.13" in absent[1]
    err = _copy_on_fork_attribute(struct.pack("=IHHIIi", 20, 2, 0, 1, 0, -errno.EPERM))
    assert err == (None, f"RDMA netlink refused the query: {os.strerror(errno.EPERM)}")


def test_use_vfork_is_judged_where_cpython_reads_it(monkeypatch) -> None:
    """``subprocess._USE_VFORK = False`` makes 3.10-3.13 fork for a plain
    Popen; 3.14 has no such flag and vforks whatever a program sets: the
    doctor says what this CPython will do, not what the attribute says."""
    monkeypatch.setattr(subprocess, "_USE_VFORK", False, raising=False)
    default = doctor().subprocess_default
    if sys.version_info < (3, 10) or sys.version_info >= (3, 14):
        expected = "fork() then exec (3.9" if sys.version_info < (3, 10) else "vfork()"
    else:
        expected = "fork() then exec (subprocess._USE_VFORK is False"
    assert default.startswith(expected), default


def test_text_escapes_what_other_processes_control() -> None:
    """A process's command line and the names of its mapped files are its
    owner's to choose: `doctor --all` and `doctor --pid` print their control
    codes escaped (a title change, cursor-up and erase-line, a C1 CSI), never
    raw, and --json keeps them as data."""
    hostile = "\x1b]0;owned\x07\x1b[1A\x1b[2K\x9b2J"
    path = shm_file("rdmaspawn-\x1b[2K-name")
    try:
        with Holder(files=[path], options=["-X", hostile]) as holder:
            scan = cli("--all")
            one = cli("--pid", str(holder.pid))
            lines = cli("--all", "--json")
    finally:
        os.unlink(path)
    for run in (scan, one):
        assert run.returncode == 1, run.stdout + run.stderr
        assert not any(ch in run.stdout for ch in "\x1b\x07\x9b"), run.stdout
    # --all cuts a command line at 80 columns, and the interpreter's path
    # before the text may be long (a CI venv): the title change comes first.
    line = next(x for x in scan.stdout.splitlines() if x.startswith(f"pid {holder.pid} "))
    assert "\\x1b]0;owned\\x07" in line, scan.stdout
    assert "rdmaspawn-\\x1b[2K-name" in one.stdout
    by_pid = {o.get("pid"): o for o in map(json.loads, lines.stdout.splitlines())}
    assert hostile in by_pid[holder.pid]["command"]


def test_clone_path_in_text_and_json() -> None:
    """The doctor names the system call the engine starts children with: clone3
    by default, clone (and why) under RDMASPAWN_CLONE=clone; for another
    process it cannot know, and says so (null in JSON)."""
    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN_CLONE"}
    doc = [sys.executable, "-m", "rdmaspawn", "doctor"]
    plain = json.loads(subprocess.run([*doc, "--json"], env=env, capture_output=True,
                                      text=True, timeout=60).stdout)
    assert plain["clone_path"] == "clone3" and "CLONE_CLEAR_SIGHAND" in plain["clone_path_note"]
    env["RDMASPAWN_CLONE"] = "clone"
    forced = json.loads(subprocess.run([*doc, "--json"], env=env, capture_output=True,
                                       text=True, timeout=60).stdout)
    assert forced["clone_path"] == "clone" and "RDMASPAWN_CLONE=clone" in forced["clone_path_note"]
    text = subprocess.run(doc, env=env, capture_output=True, text=True, timeout=60).stdout
    assert "rdmaspawn's clone path: clone -- glibc clone(), forced by RDMASPAWN_CLONE=clone" in text
    with Holder() as w:
        other = doctor(w.pid)
        assert other.clone_path is None and "only the process itself" in other.clone_path_note
