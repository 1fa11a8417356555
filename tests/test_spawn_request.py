"""The engine's request converted in C (csrc/python/convert.c): the child
it asks for, and the exception for each bad value, raised before any clone.

``rdmaspawn.spawn()`` makes a ``SpawnRequest``; ``engine.spawn_request()``
hands it to the one C conversion, which spawns it or raises.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal

import pytest
from helpers.probe import probe_path
from helpers.process_state import children

from rdmaspawn._native import capi, engine
from rdmaspawn._native.request import SpawnRequest

#: The probe's path in a case's argv (built at the first test, not at collection).
PROBE = object()


def _spawn(**kwargs):
    """spawn(probe) with stdout to a pipe: its report and the exit status."""
    argv = kwargs.pop("argv", [PROBE])
    probe = [probe_path() if a is PROBE else a for a in argv]
    probe = tuple(probe) if isinstance(argv, tuple) else iter(probe) if kwargs.pop(
        "as_iterator", False) else probe
    r, w = os.pipe()
    try:
        pid, pidfd = engine.spawn(probe, kwargs.pop("exec_list", [probe_path()]),
                                  stdout=w, close_in_child=[r, *kwargs.pop("close", [])],
                                  **kwargs)
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    if pidfd >= 0:
        os.close(pidfd)
    return json.loads(out), os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_c_conversion_reads_spawnrequests_fields():
    """The C side's field list is SpawnRequest's, in its order."""
    assert capi.spawn_request_fields() == SpawnRequest._fields


CASES = {
    "plain": ({}, {}),
    "str argv and env": ({"argv": [PROBE, "é", "x y"], "env": ["A=1", b"B=\xff"]},
                         {"env": ["A=1", "B=\xff"]}),
    "tuple argv, empty env": ({"argv": (PROBE,), "env": []}, {"env": []}),
    "an iterator": ({"as_iterator": True, "env": iter([b"A=1"])}, {"env": ["A=1"]}),
    "cwd": ({"cwd": "/tmp"}, {"cwd": "/tmp"}),
    "cwd bytes": ({"cwd": b"/usr"}, {"cwd": "/usr"}),
    "cwd PathLike": ({"cwd": pathlib.Path("/")}, {"cwd": "/"}),
    "umask": ({"umask": 0o077}, {}),
    "setsid": ({"setsid": True}, {}),
    "pgid 0": ({"pgid": 0}, {}),
    "pass_fds": ({"pass_fds": [0]}, {}),
    "no restore_signals": ({"restore_signals": False}, {}),
    "no close_fds": ({"close_fds": False}, {}),
    "stdin and stderr": ({"stdin": 0, "stderr": 1}, {}),
    "pidfd": ({"want_pidfd": True}, {}),
    "close methods": ({"close_method": "loop"}, {}),
    "clone": ({"force_clone": True}, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_child_is_the_one_asked_for(name):
    kwargs, seen = CASES[name]
    old = signal.signal(signal.SIGUSR2, lambda *a: None)
    try:
        report, status = _spawn(**dict(kwargs))
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert status == 0
    for key, value in seen.items():
        assert (sorted(report[key]) if key == "env" else report[key]) == value


FAILURES = {
    "no such file": ([b"x"], [b"/nonexistent"], {},
                     ("SpawnError", (2, "No such file or directory"), b"/nonexistent", "execve")),
    "second of two": ([b"x"], [b"/nonexistent", b"/etc/passwd"], {},
                      ("SpawnError", (13, "Permission denied"), b"/etc/passwd", "execve")),
    "a directory": ([b"x"], ["/tmp"], {},
                    ("SpawnError", (13, "Permission denied"), "/tmp", "execve")),
    "chdir": ([b"x"], [b"/bin/true"], {"cwd": "/nonexistent"},
              ("SpawnError", (2, "No such file or directory"), "/nonexistent", "chdir")),
    "bad stdin": ([b"x"], [b"/bin/true"], {"stdin": 999},
                  ("SpawnError", (9, "Bad file descriptor"), None, "dup2")),
    "NUL in argv": ([b"a\0b"], [b"/bin/true"], {}, ("ValueError", ("embedded null byte",))),
    "NUL in env": ([b"x"], [b"/bin/true"], {"env": [b"A=\0"]},
                   ("ValueError", ("embedded null byte",))),
    "NUL in cwd": ([b"x"], [b"/bin/true"], {"cwd": "/\0"}, ("ValueError", ("embedded null byte",))),
    "fd out of range": ([b"x"], [b"/bin/true"], {"stdout": 2**40},
                        ("OverflowError", ("stdout out of range for a C int: 1099511627776",))),
    "bool fd": ([b"x"], [b"/bin/true"], {"stdin": True},
                ("TypeError", ("stdin must be an int, not bool",))),
    "bad close method": ([b"x"], [b"/bin/true"], {"close_method": "nope"},
                         ("ValueError", ("close_method must be one of ['auto', 'loop', 'proc']",))),
    "an int argument": ([b"x", 3], [b"/bin/true"], {},
                        ("TypeError", ("expected str, bytes or os.PathLike object, not int",))),
    "None executable": ([b"x"], [None], {},
                        ("TypeError", ("expected str, bytes or os.PathLike object, not NoneType",))),
    "argv not iterable": (3, [b"/bin/true"], {}, ("TypeError", ("'int' object is not iterable",))),
    "gid": ([b"x"], [b"/bin/true"], {"gid": -5}, ("ValueError", ("gid out of range: -5",))),
    "group": ([b"x"], [b"/bin/true"], {"groups": ["a"]},
              ("TypeError", ("group must be an int, not str",))),
    "group beyond a gid_t": ([b"x"], [b"/bin/true"], {"groups": [2**32]},
                             ("ValueError", ("group out of range: 4294967296",))),
    "negative pass_fds": ([b"x"], [b"/bin/true"], {"pass_fds": [-3]},
                          ("ValueError", ("bad value(s) in pass_fds",))),
    "str pass_fds": ([b"x"], [b"/bin/true"], {"pass_fds": ["a"]},
                     ("TypeError", ("pass_fds item must be an int, not str",))),
    "str close_in_child": ([b"x"], [b"/bin/true"], {"close_in_child": ["a"]},
                           ("TypeError", ("fd must be an int, not str",))),
}


@pytest.mark.parametrize("name", sorted(FAILURES))
def test_a_failure_raises_its_exception_and_leaves_no_child(name):
    argv, exec_list, kwargs, expected = FAILURES[name]
    kids = children()
    with pytest.raises(BaseException) as info:
        engine.spawn(argv, exec_list, **kwargs)
    e = info.value
    got = (type(e).__name__, e.args)
    if isinstance(e, engine.SpawnError):
        got += (e.filename, e.step)
    assert got == expected
    assert children() == kids


def test_a_child_left_for_the_caller_has_the_fail_status():
    with pytest.raises(engine.SpawnError) as info:
        engine.spawn([b"x"], [b"/nonexistent"], reap_on_failure=False, fail_status=3)
    assert info.value.pid is not None
    assert os.waitstatus_to_exitcode(os.waitpid(info.value.pid, 0)[1]) == 3


class _NoTruth:
    def __bool__(self):
        raise ZeroDivisionError("no truth")


@pytest.mark.parametrize("value, on", [(None, False), (0.0, False), ("", False), ([], False),
                                       ("yes", True), (1.5, True), ([0], True)])
def test_a_flag_is_taken_by_truth_as_subprocess_takes_close_fds(value, on):
    """close_fds=None keeps fds open, as subprocess.Popen's does on every
    version; each flag keyword alike, and a __bool__ that raises propagates."""
    fd = os.dup(0)
    os.set_inheritable(fd, True)
    try:
        report, status = _spawn(close_fds=value, setsid=value, restore_signals=value)
    finally:
        os.close(fd)
    assert status == 0
    assert (str(fd) not in report["fds"], report["sid"] == report["pid"]) == (on, on)
    with pytest.raises(ZeroDivisionError, match="no truth"):
        engine.spawn([b"x"], [b"/bin/true"], want_pidfd=_NoTruth())


def test_a_bad_argument_is_raised_before_the_setup_is_packed():
    """The request is converted before its setup is packed: a bad argv beside
    a cgroup that is none raises the argv's TypeError, and opens nothing."""
    from rdmaspawn._child.model import build

    fds = os.listdir("/proc/self/fd")
    for argv in ([b"x", 3], [b"x"]):
        with pytest.raises(TypeError if len(argv) > 1 else FileNotFoundError):
            engine.spawn(argv, [b"/bin/true"], setup=build(cgroup="/nonexistent/cg"))
    assert os.listdir("/proc/self/fd") == fds


def test_the_converted_request_is_spawned_once_and_only_inside_then():
    """then() gets a spawn that works once; kept past then(), it refuses."""
    request = SpawnRequest([b"x"], [b"/nonexistent"])
    kept = []

    def then(spawn):
        kept.append(spawn)
        with pytest.raises(engine.SpawnError):
            spawn(0)
        return spawn(0)

    with pytest.raises(RuntimeError, match="spawned once"):
        capi.spawn_request(request, then)
    with pytest.raises(RuntimeError, match="spawned once"):
        kept[0](0)
