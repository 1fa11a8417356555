"""The engine's plain request in C (csrc/python/spawn_request.c) against its Python conversion.

``rdmaspawn.spawn()`` hands a request without declarative setup to the C
conversion, which spawns it where every value is plain and answers None
otherwise; ``engine.spawn_packed()`` converts the rest in Python. Each
request below runs both ways (the C one made to decline every request,
as it declines one that is not plain) and the child's report (the probe:
argv, cwd, environment, fds, umask, session, group, signals), the
exception, or the failed child's status must be the same.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal

import pytest
from helpers.probe import normalize, probe_path

from rdmaspawn._native import capi, engine
from rdmaspawn._native.request import SpawnRequest

#: The probe's path in a case's argv (built at the first test, not at collection).
PROBE = object()


def _decline(request: SpawnRequest) -> None:
    """The C conversion's answer to a request that is not plain."""


def _spawn(in_c: bool, monkeypatch: pytest.MonkeyPatch, **kwargs):
    """spawn(probe) with stdout to a pipe: the normalized report and the exit status."""
    if not in_c:
        monkeypatch.setattr(engine, "_spawn_plain_request", _decline)
    argv = kwargs.pop("argv", [PROBE])
    probe = type(argv)(probe_path() if a is PROBE else a for a in argv)  # a tuple stays one
    r, w = os.pipe()
    try:
        pid, pidfd = engine.spawn(probe, kwargs.pop("exec_list", [probe_path()]),
                                  stdout=w, close_in_child=[r, *kwargs.pop("close", [])],
                                  **kwargs)
    finally:
        os.close(w)
        monkeypatch.undo()
    with os.fdopen(r, "rb") as f:
        out = f.read()
    if pidfd >= 0:
        os.close(pidfd)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return normalize(json.loads(out), os.getpid(), kwargs), status, pidfd >= 0


def test_the_c_conversion_reads_spawnrequests_fields():
    """The C side's field list is SpawnRequest's, so the C path is in use."""
    assert capi.spawn_request_fields() == SpawnRequest._fields
    assert engine._spawn_plain_request is capi.spawn_request_plain


def test_a_plain_request_never_reaches_the_python_conversion(monkeypatch):
    def refuse(*_):
        raise AssertionError("converted in Python")

    monkeypatch.setattr(engine, "spawn_packed", refuse)
    pid, pidfd = engine.spawn([b"/bin/true"], ["/bin/true"], env=[b"A=1"], cwd="/",
                              pass_fds=[0], close_in_child=(-1,), umask=0o22, pgid=0)
    assert pidfd == -1
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


@pytest.mark.parametrize("request_kwargs", [
    {"argv": [pathlib.Path("/bin/true")]},     # a PathLike
    {"argv": iter([b"/bin/true"])},            # not a list or tuple
    {"env": {"A": "1"}.keys()},                # a view of str
    {"stdin": True},                           # a bool where an fd goes
    {"cwd": pathlib.Path("/")},
    {"groups": []},
], ids=["pathlike", "iterator", "keys-view", "bool-fd", "pathlike-cwd", "groups"])
def test_anything_else_is_converted_in_python(monkeypatch, request_kwargs):
    seen = []
    real = engine.spawn_packed

    def spy(request, setup_ptr):
        seen.append(request)
        return real(request, setup_ptr)

    monkeypatch.setattr(engine, "spawn_packed", spy)
    kwargs = {"argv": [b"/bin/true"], **request_kwargs}
    argv = kwargs.pop("argv")
    try:
        pid, _ = engine.spawn(argv, ["/bin/true"], **kwargs)
    except (TypeError, ValueError, OSError):
        pass  # what Python makes of the value is its own tests'; only the route counts here
    else:
        os.waitpid(pid, 0)
    assert len(seen) == 1


CASES = {
    "plain": {},
    "str argv and env": {"argv": [PROBE, "é", "x y"], "env": ["A=1", b"B=\xff"]},
    "tuple argv, empty env": {"argv": (PROBE,), "env": []},
    "cwd": {"cwd": "/tmp"},
    "cwd bytes": {"cwd": b"/usr"},
    "umask": {"umask": 0o077},
    "setsid": {"setsid": True},
    "pgid 0": {"pgid": 0},
    "pass_fds": {"pass_fds": [0]},
    "no restore_signals": {"restore_signals": False},
    "no close_fds": {"close_fds": False},
    "stdin and stderr": {"stdin": 0, "stderr": 1},
    "pidfd": {"want_pidfd": True},
    "close methods": {"close_method": "loop"},
    "clone": {"force_clone": True},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_child_is_the_same_either_way(monkeypatch, name):
    old = signal.signal(signal.SIGUSR2, lambda *a: None)
    try:
        in_c = _spawn(True, monkeypatch, **dict(CASES[name]))
        in_python = _spawn(False, monkeypatch, **dict(CASES[name]))
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert in_c == in_python
    assert in_c[1] == 0


def _failure(in_c: bool, monkeypatch: pytest.MonkeyPatch, argv, exec_list, **kwargs):
    if not in_c:
        monkeypatch.setattr(engine, "_spawn_plain_request", _decline)
    try:
        with pytest.raises(BaseException) as info:
            engine.spawn(argv, exec_list, **kwargs)
    finally:
        monkeypatch.undo()
    e = info.value
    status = None
    pid = getattr(e, "pid", None)
    if pid is not None:
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        pid = "a pid"
    return (type(e), e.args, getattr(e, "filename", None), getattr(e, "step", None),
            getattr(e, "in_setup", None), pid, status)


FAILURES = {
    "no such file": ([b"x"], [b"/nonexistent"], {}),
    "second of two": ([b"x"], [b"/nonexistent", b"/etc/passwd"], {}),
    "a directory": ([b"x"], ["/tmp"], {}),
    "chdir": ([b"x"], [b"/bin/true"], {"cwd": "/nonexistent"}),
    "not reaped": ([b"x"], [b"/nonexistent"], {"reap_on_failure": False}),
    "bad stdin": ([b"x"], [b"/bin/true"], {"stdin": 999}),
    "fail_status": ([b"x"], [b"/nonexistent"], {"reap_on_failure": False, "fail_status": 3}),
    "NUL in argv": ([b"a\0b"], [b"/bin/true"], {}),
    "NUL in cwd": ([b"x"], [b"/bin/true"], {"cwd": "/\0"}),
    "fd out of range": ([b"x"], [b"/bin/true"], {"stdout": 2**40}),
    "bad close method": ([b"x"], [b"/bin/true"], {"close_method": "nope"}),
    "unencodable": (["\udcff\ud800"], [b"/bin/true"], {}),
}


@pytest.mark.parametrize("name", sorted(FAILURES))
def test_a_failure_is_the_same_either_way(monkeypatch, name):
    argv, exec_list, kwargs = FAILURES[name]
    in_c = _failure(True, monkeypatch, argv, exec_list, **kwargs)
    in_python = _failure(False, monkeypatch, argv, exec_list, **kwargs)
    assert in_c == in_python
