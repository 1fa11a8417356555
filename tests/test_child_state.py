"""The child's world, checked from inside a real child.

For each request, the probe child reports its cwd, session, process group,
umask, ids and groups, open fds, signal mask and dispositions and
environment; rdmaspawn's child must report exactly what CPython's
subprocess child reports for the same request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from helpers.probe import probe_path, run_probe

import rdmaspawn

ROOT = os.geteuid() == 0
HAS_PROCESS_GROUP = sys.version_info >= (3, 11)


def _both(**kwargs):
    theirs = run_probe(subprocess.Popen, **kwargs)
    ours = run_probe(rdmaspawn.Popen, **kwargs)
    return theirs, ours


CASES = {
    "default": {},
    "cwd": {"cwd": "/tmp"},
    "cwd_bytes": {"cwd": b"/usr"},
    "env": {"env": {"A": "1", "PATH": "/bin"}},
    "empty_env": {"env": {}},
    "new_session": {"start_new_session": True},
    "umask": {"umask": 0o077},
    "no_restore_signals": {"restore_signals": False},
    "close_fds_false": {"close_fds": False},
    "stdin_devnull": {"stdin": subprocess.DEVNULL},
    "stderr_stdout": {"stderr": subprocess.STDOUT},
    "stderr_pipe": {"stderr": subprocess.PIPE},
    "stdin_is_stdout_fd": {"stdin": 1},
}
if HAS_PROCESS_GROUP:
    CASES["process_group_0"] = {"process_group": 0}
if ROOT:
    CASES["user_group"] = {"user": "nobody", "group": "nogroup"}
    CASES["extra_groups"] = {"extra_groups": [1, 2, 3]}
    CASES["all_ids"] = {"user": 65534, "group": 65534, "extra_groups": []}


@pytest.mark.parametrize("name", sorted(CASES))
def test_child_sees_what_cpython_child_sees(name):
    """Each request gives the same child state through both spawners."""
    theirs, ours = _both(**CASES[name])
    assert ours == theirs


def test_pass_fds_inheritable_and_others_closed():
    """pass_fds survive without CLOEXEC; other inheritable fds are closed."""
    keep_r, keep_w = os.pipe()
    extra = os.open("/dev/null", os.O_RDONLY)
    os.set_inheritable(extra, True)
    try:
        theirs, ours = _both(pass_fds=(keep_r, keep_w))
        assert ours == theirs
        assert str(keep_r) in ours["fds"] and not ours["fds"][str(keep_r)]["cloexec"]
        assert str(extra) not in ours["fds"]
        theirs, ours = _both(close_fds=False)
        assert ours == theirs
        assert str(extra) in ours["fds"]
    finally:
        for fd in (keep_r, keep_w, extra):
            os.close(fd)


def test_signal_mask_and_dispositions():
    """The parent's mask comes back; handled signals reset, ignored stay."""
    old_usr1 = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    old_usr2 = signal.signal(signal.SIGUSR2, lambda *a: None)
    result = {}

    def spawn_with_mask():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
        result["both"] = _both()
        result["norestore"] = _both(restore_signals=False)

    try:
        t = threading.Thread(target=spawn_with_mask)
        t.start()
        t.join()
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)
        signal.signal(signal.SIGUSR2, old_usr2)
    theirs, ours = result["both"]
    assert ours == theirs
    assert signal.SIGTERM in ours["blocked"] and signal.SIGHUP in ours["blocked"]
    assert signal.SIGUSR1 in ours["ignored"]
    assert signal.SIGPIPE not in ours["ignored"]
    assert ours["handled"] == []
    theirs, ours = result["norestore"]
    assert ours == theirs
    assert signal.SIGPIPE in ours["ignored"]


@pytest.mark.parametrize("force_clone", [False, True], ids=["clone3", "clone"])
@pytest.mark.parametrize("close_method", ["auto", "proc", "loop"])
def test_engine_paths_agree(force_clone, close_method):
    """Both clone paths and all three fd-closing methods give the same child."""
    import json

    old = signal.signal(signal.SIGUSR2, lambda *a: None)
    extra = os.open("/dev/null", os.O_RDONLY)
    os.set_inheritable(extra, True)
    keep = os.open("/dev/null", os.O_RDONLY)
    r, w = os.pipe()
    try:
        pid, _ = rdmaspawn.spawn(
            [probe_path()],
            [probe_path()],
            stdout=w,
            close_in_child=(r,),
            pass_fds=(keep,),
            close_method=close_method,
            force_clone=force_clone,
        )
        os.close(w)
        w = -1
        with os.fdopen(r, "rb") as f:
            r = -1
            report = json.loads(f.read())
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        signal.signal(signal.SIGUSR2, old)
        for fd in (extra, keep, r, w):
            if fd >= 0:
                os.close(fd)
    assert sorted(int(fd) for fd in report["fds"]) == [0, 1, 2, keep]
    assert report["handled"] == []
    assert signal.SIGPIPE not in report["ignored"]


def test_low_fds_moved_out_of_the_way():
    """With 0, 1 and 2 closed in the parent, pipes land there and still work."""
    code = r"""
import os, sys, subprocess
import rdmaspawn
results = []
for P in (subprocess.Popen, rdmaspawn.Popen):
    for fd in (0, 1, 2):
        os.close(fd)
    try:
        p = P([sys.executable, "-c",
               "import sys; d = sys.stdin.read(); sys.stdout.write(d.upper()); sys.stderr.write(d)"],
              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = p.communicate(b"abc")
        results.append((out, err, p.returncode))
    except Exception as exc:  # stderr is gone: report through the file
        results.append(repr(exc))
    finally:
        for fd in (0, 1, 2):
            try:
                os.fstat(fd)
            except OSError:
                os.open("/dev/null", os.O_RDWR)
with open(sys.argv[1], "w") as f:
    f.write(repr(results))
"""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".txt") as out:
        res = subprocess.run([sys.executable, "-c", code, out.name],
                             stdin=subprocess.DEVNULL, capture_output=True)
        assert res.returncode == 0, res.stderr
        results = eval(out.read())
    assert results[0] == results[1] == (b"ABC", b"abc", 0)


def test_swapped_fds():
    """stdout and stderr given as each other's fds are swapped correctly."""
    code = r"""
import os, sys, subprocess, tempfile
import rdmaspawn
out = []
for P in (subprocess.Popen, rdmaspawn.Popen):
    a, b = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    saved = os.dup(1), os.dup(2)
    os.dup2(a.fileno(), 1); os.dup2(b.fileno(), 2)
    try:
        P([sys.executable, "-c", "import sys; sys.stdout.write('O'); sys.stderr.write('E')"],
          stdout=2, stderr=1).wait()
    finally:
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
    a.seek(0); b.seek(0)
    out.append((a.read(), b.read()))
print(repr(out))
"""
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    out = eval(res.stdout)
    assert out[0] == out[1] == (b"E", b"O")
