"""Failures: the same exception as CPython's subprocess, and nothing left behind.

Each bad request goes to both ``subprocess.Popen`` and ``rdmaspawn.Popen``;
the exception type, errno, filename and message must match, and afterwards
the process has no new fd and no zombie child.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from process_state import children, open_fds

import rdmaspawn

ROOT = os.geteuid() == 0


def _outcome(popen, args, kwargs):
    try:
        with popen(args, **kwargs) as p:
            p.communicate()
        return ("ok", p.returncode)
    except Exception as exc:  # compare whatever was raised
        return (type(exc), getattr(exc, "errno", None), getattr(exc, "filename", None),
                str(exc))


def _not_executable(tmp_path):
    path = tmp_path / "not_executable"
    path.write_text("#!/bin/sh\necho hi\n")
    path.chmod(0o644)
    return str(path)


CASES = {
    "missing": (["/nonexistent/program"], {}),
    "missing_on_path": (["no-such-program-rdmaspawn"], {}),
    "missing_env_path": (["ls"], {"env": {"PATH": "/nonexistent"}}),
    "directory": (["/tmp"], {}),
    "bad_cwd": (["/bin/true"], {"cwd": "/nonexistent/dir"}),
    "cwd_is_file": (["/bin/true"], {"cwd": "/etc/passwd"}),
    "bad_executable": (["true"], {"executable": "/nonexistent/true"}),
    "e2big": (["/bin/true", "x" * (3 << 20)], {}),
    "nul_in_arg": (["/bin/true", "a\0b"], {}),
    "nul_in_env": (["/bin/true"], {"env": {"A": "a\0b"}}),
    "eq_in_env_key": (["/bin/true"], {"env": {"A=B": "c"}}),
    "int_arg": (["/bin/true", 3], {}),
    "bad_stdin_fd": (["/bin/true"], {"stdin": 4000}),
    "bad_pass_fd": (["/bin/true"], {"pass_fds": (4000,)}),
    "negative_pass_fd": (["/bin/true"], {"pass_fds": (-3,)}),
    "bad_user": (["/bin/true"], {"user": "no-such-user-rdmaspawn"}),
    "bad_group": (["/bin/true"], {"group": "no-such-group-rdmaspawn"}),
    "bad_extra_group": (["/bin/true"], {"extra_groups": ["no-such-group-rdmaspawn"]}),
    "shell_missing": ("exit 3", {"shell": True, "executable": "/nonexistent/sh"}),
}
if not ROOT:
    CASES["setuid_denied"] = (["/bin/true"], {"user": 0})


@pytest.mark.parametrize("name", sorted(CASES) + ["not_executable"])
def test_same_exception_as_cpython(name, tmp_path):
    """A bad request raises what CPython raises, and leaks nothing."""
    if name == "not_executable":
        args, kwargs = [_not_executable(tmp_path)], {}
    else:
        args, kwargs = CASES[name]
    theirs = _outcome(subprocess.Popen, args, kwargs)
    fds, kids = open_fds(), children()
    ours = _outcome(rdmaspawn.Popen, args, kwargs)
    assert ours == theirs
    assert open_fds() == fds
    assert children() == kids


def test_unprivileged_setuid_fails_like_cpython():
    """A uid change that the kernel refuses is a PermissionError from the child."""
    code = r"""
import os, subprocess, rdmaspawn
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
out = []
for P in (subprocess.Popen, rdmaspawn.Popen):
    for kw in ({"user": 0}, {"group": 0}, {"extra_groups": [0]}):
        try:
            P(["/bin/true"], **kw).wait()
            out.append("ok")
        except OSError as e:
            out.append((type(e).__name__, e.errno, e.filename))
print(repr(out))
"""
    if not ROOT:
        pytest.skip("needs root to drop to nobody first")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = eval(res.stdout)
    assert out[:3] == out[3:]
    assert out[0][0] == "PermissionError"


def test_emfile_in_parent():
    """Out of fds in the parent: OSError(EMFILE) as CPython, and no leak."""
    code = r"""
import errno, os, resource, subprocess, rdmaspawn
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
hog = []
try:
    while True:
        hog.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
for fd in hog[-3:]:
    os.close(fd)      # room for some pipes, not all
out = []
for P in (subprocess.Popen, rdmaspawn.Popen):
    before = sorted(os.listdir("/proc/self/fd"))
    try:
        P(["/bin/true"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE).wait()
        out.append("ok")
    except OSError as e:
        out.append((type(e).__name__, e.errno))
    out.append(sorted(os.listdir("/proc/self/fd")) == before)
print(repr(out))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    theirs_exc, theirs_clean, ours_exc, ours_clean = eval(res.stdout)
    assert ours_exc == theirs_exc == ("OSError", 24)
    assert ours_clean is True
    # CPython < 3.11 leaks the pipes it made before the failing one;
    # rdmaspawn closes them (as 3.11+ does).
    assert theirs_clean is (sys.version_info >= (3, 11))


def test_engine_reports_step_and_reaps():
    """The engine names the failed step; a failed child is gone when it returns."""
    kids = children()
    with pytest.raises(rdmaspawn.SpawnError) as info:
        rdmaspawn.spawn([b"x"], [b"/bin/true"], cwd=b"/nonexistent")
    assert info.value.step == "chdir" and info.value.errno == 2
    assert "originated from chdir()" in str(info.value)
    with pytest.raises(rdmaspawn.SpawnError) as info:
        rdmaspawn.spawn([b"x"], [b"/nonexistent", b"/etc/passwd"])
    # The first error that is not ENOENT wins, as in CPython.
    assert info.value.step == "execve" and info.value.errno == 13
    assert children() == kids


def test_engine_keeps_failed_child_when_asked():
    """reap_on_failure=False hands the failed child's pid to the caller."""
    with pytest.raises(rdmaspawn.SpawnError) as info:
        rdmaspawn.spawn([b"x"], [b"/nonexistent"], reap_on_failure=False, fail_status=127)
    pid = info.value.pid
    assert pid is not None
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 127


def test_engine_pidfd():
    """want_pidfd gives a pidfd for the child that becomes readable when it exits."""
    import select

    pid, pidfd = rdmaspawn.spawn([b"true"], [b"/bin/true"], want_pidfd=True)
    try:
        assert pidfd >= 0
        assert select.select([pidfd], [], [], 10)[0] == [pidfd]
        assert os.waitpid(pid, 0)[0] == pid
    finally:
        os.close(pidfd)


@pytest.mark.parametrize("bad, exc", [
    ({"argv": [b"a\0"]}, ValueError),
    ({"exec_list": [None]}, TypeError),
    ({"cwd": 3.5}, TypeError),
    ({"stdin": "0"}, TypeError),
    ({"gid": -5}, ValueError),
    ({"close_method": "nope"}, ValueError),
])
def test_engine_rejects_bad_input_before_clone(bad, exc):
    """Bad input raises in the parent; no child is ever created."""
    kids = children()
    kwargs = {"argv": [b"true"], "exec_list": [b"/bin/true"]}
    kwargs.update(bad)
    with pytest.raises(exc):
        rdmaspawn.spawn(kwargs.pop("argv"), kwargs.pop("exec_list"), **kwargs)
    assert children() == kids
