"""A controlling terminal without fork: rdmaspawn.pty_spawn and controlling_tty=.

The child reports its terminal from inside (tests/children/setup_probe.py: ttyname,
session leader, foreground process group); with the hazard planted it must
match what pty.fork() + exec gives under stock CPython without the hazard.
"""
from __future__ import annotations

import os
import textwrap

from helpers.hazard import run_with_hazard
from helpers.report import last_json

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children", "setup_probe.py")

_READ_ALL = """
import json
def read_all(fd):
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:     # EIO: the other side is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    return out

def tty_state(raw, pid):
    state = json.loads(raw.decode().strip().splitlines()[-1])
    return {k: state[k] for k in ("tty", "session_leader", "group_leader", "tty_foreground")}
"""


def _run(code: str, method: str | None) -> dict:
    code = textwrap.dedent(code).replace("@PROBE@", repr(PROBE))
    run = run_with_hazard(_READ_ALL + code, method)
    return last_json(run)


def test_pty_spawn_matches_pty_fork() -> None:
    """pty_spawn under the hazard gives the child what pty.fork() + exec
    gives under stock CPython: a session of its own whose controlling
    terminal is the pty on fds 0-2, in the foreground."""
    stock = _run("""
        import pty
        pid, master = pty.fork()
        if pid == 0:
            os.execv(sys.executable, [sys.executable, @PROBE@])
        state = tty_state(read_all(master), pid)
        print(json.dumps([state, describe(os.waitpid(pid, 0)[1])]))
    """, None)
    engine = _run("""
        import rdmaspawn
        pid, master = rdmaspawn.pty_spawn([sys.executable, @PROBE@], winsize=(40, 120))
        state = tty_state(read_all(master), pid)
        print(json.dumps([state, describe(os.waitpid(pid, 0)[1])]))
    """, "madvise")
    assert stock[1] == engine[1] == "exit 0"
    assert stock[0]["tty"].startswith("/dev/pts/")
    assert engine[0]["tty"].startswith("/dev/pts/")
    stock[0].pop("tty"), engine[0].pop("tty")
    assert engine[0] == stock[0] == {"session_leader": True, "group_leader": True,
                                     "tty_foreground": True}


def test_pty_spawn_window_size_and_errors() -> None:
    """winsize reaches the child's terminal; a missing program raises the
    OSError subprocess would, and leaves no fd open."""
    out = _run("""
        import rdmaspawn
        pid, master = rdmaspawn.pty_spawn(["stty", "size"], winsize=(33, 99))
        size = read_all(master).decode().split()
        os.waitpid(pid, 0)
        before = sorted(os.listdir("/proc/self/fd"))
        try:
            rdmaspawn.pty_spawn(["rdmaspawn-no-such-program"])
            error = None
        except FileNotFoundError as exc:
            error = [exc.errno, exc.filename]
        print(json.dumps({"size": size, "error": error,
                          "fds": sorted(os.listdir("/proc/self/fd")) == before}))
    """, "madvise")
    assert out == {"size": ["33", "99"], "error": [2, "rdmaspawn-no-such-program"],
                   "fds": True}


def test_controlling_tty_keyword_and_helper() -> None:
    """Popen(controlling_tty=0) with a pty as stdin, and the preexec helper
    under patch(), make it the controlling terminal as pty_spawn does."""
    out = _run("""
        import subprocess, rdmaspawn, rdmaspawn.preexec as P
        out = {}
        for how in ("keyword", "helper"):
            master, slave = os.openpty()
            if how == "keyword":
                proc = rdmaspawn.Popen([sys.executable, @PROBE@], stdin=slave, stdout=slave,
                                       stderr=slave, controlling_tty=0)
            else:
                with rdmaspawn.patched():
                    proc = subprocess.Popen([sys.executable, @PROBE@], stdin=slave,
                                            stdout=slave, stderr=slave,
                                            preexec_fn=P.controlling_tty(0))
            os.close(slave)
            state = tty_state(read_all(master), proc.pid)
            state["tty"] = state["tty"].startswith("/dev/pts/")
            out[how] = [state, proc.wait()]
        print(json.dumps(out))
    """, "madvise")
    expected = [{"tty": True, "session_leader": True, "group_leader": True,
                 "tty_foreground": True}, 0]
    assert out == {"keyword": expected, "helper": expected}


def test_pty_spawn_takes_a_str_as_pty_spawn_does() -> None:
    """A str argv is one program name, searched in PATH, as for CPython's
    pty.spawn ("tty" is ["tty"], not the program "t" with arguments "t",
    "y"); bytes alike."""
    out = _run("""
        import rdmaspawn
        out = []
        for argv in ("tty", b"tty"):
            pid, master = rdmaspawn.pty_spawn(argv)
            text = read_all(master).decode()
            out.append([text.startswith("/dev/pts/"), describe(os.waitpid(pid, 0)[1])])
        print(json.dumps(out))
    """, "madvise")
    assert out == [[True, "exit 0"], [True, "exit 0"]]
