"""rdmaspawn's fork_exec called directly, as CPython's _execute_child and
multiprocessing call it: its contract about the failed child's pid."""
from __future__ import annotations

import os
import threading

import pytest
from helpers.process_state import children

from rdmaspawn.dropin import cpython as _cpython
from rdmaspawn.dropin.forkexec import fork_exec


def _call(errpipe_read: int, errpipe_write: int, params: tuple = (), **named: object) -> tuple:
    """A positional fork_exec call of this CPython (or of ``params``), built by name."""
    base = dict(
        args=[b"x"], executable_list=[b"/nonexistent/rdmaspawn"], close_fds=True,
        fds_to_keep=(errpipe_write,), cwd=None, env_list=None,
        p2cread=-1, p2cwrite=-1, c2pread=-1, c2pwrite=-1, errread=-1, errwrite=-1,
        errpipe_read=errpipe_read, errpipe_write=errpipe_write, restore_signals=True,
        call_setsid=False, pgid_to_set=-1, gid=None, extra_groups=None, uid=None,
        child_umask=-1, preexec_fn=None, allow_vfork=True)
    base.update(named)
    return tuple(base[name] for name in params or _cpython.require().params)


def test_a_22_argument_call_is_routed_by_name_in_c(monkeypatch):
    """3.14's call (no allow_vfork, pgid_to_set still 17th) reaches the C
    fork_exec's plain path, which reads each argument where 3.14 puts it:
    process_group=0 makes the child a group leader, on any CPython."""
    from rdmaspawn.dropin import forkexec

    # The wording is this CPython's fork_exec's, which counts 21 or 23.
    v314 = _cpython._looked_up(_cpython.TABLE[(3, 14)])._replace(
        fork_exec_wording=_cpython.require().fork_exec_wording)
    monkeypatch.setattr(_cpython, "_current", v314)
    slow_calls: list = []
    monkeypatch.setattr(forkexec, "_preexec_fn",
                        lambda owner, *args: slow_calls.append(args) or -1)
    c_fork_exec = forkexec.make_fork_exec(lambda *args: -1)
    r, w = os.pipe()
    try:
        args = _call(r, w, v314.params, args=[b"sleep", b"30"], executable_list=[b"/bin/sleep"],
                     pgid_to_set=0)
        assert len(args) == 22
        pid = c_fork_exec(*args)
    finally:
        os.close(w)
    try:
        assert slow_calls == [] and pid > 0
        assert os.getpgid(pid) == pid != os.getpgid(0)
        assert os.read(r, 100) == b""   # exec succeeded: nothing on the error pipe
    finally:
        os.close(r)
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_failed_child_pid_survives_a_closed_error_pipe():
    """When the error pipe's reader is gone (BrokenPipeError on the report),
    fork_exec still returns the failed child's pid, as CPython's does, so the
    caller can reap it: no zombie nobody knows about."""
    kids = children()
    r, w = os.pipe()
    os.close(r)
    try:
        pid = fork_exec(*_call(r, w))
    finally:
        os.close(w)
    assert isinstance(pid, int) and pid > 0
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 255
    assert children() == kids


def test_no_lost_children_from_many_threads():
    """32 threads, each failing spawns with a closed error pipe: every pid comes
    back, and once each is reaped no child is left."""
    kids = children()
    pids: list = []
    errors: list = []

    def work():
        for _ in range(10):
            r, w = os.pipe()
            os.close(r)
            try:
                pids.append(fork_exec(*_call(r, w)))
            except BaseException as exc:
                errors.append(exc)
            finally:
                os.close(w)

    threads = [threading.Thread(target=work) for _ in range(32)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for pid in pids:
        os.waitpid(pid, 0)
    assert errors == []
    assert len(pids) == 320
    assert children() == kids


def test_wrong_argument_count_is_a_type_error():
    """A call with the argument count of another CPython is refused, never
    routed, with this CPython's own message (its test_fork_exec reads it)."""
    import _posixsubprocess

    import pytest

    from rdmaspawn.dropin import wrapping as _wrapping

    cpython_fork_exec = _wrapping.innermost(_posixsubprocess.fork_exec)
    args = _call(-1, 5)
    for wrong in (args[:-1], args + (None,)):
        with pytest.raises(TypeError) as theirs:
            cpython_fork_exec(*wrong)   # fails on the count, before any fork
        with pytest.raises(TypeError) as ours:
            fork_exec(*wrong)
        assert str(ours.value) == str(theirs.value)


class _Int(int):
    """An int subclass: converted as fork_exec converts it (PyNumber_Index)."""


def test_every_call_is_started_in_c_and_only_a_preexec_fn_in_python(monkeypatch):
    """The C fork_exec converts and starts every call itself, unusual values
    (a PathLike, an int subclass, an id) included; only a preexec_fn goes to
    Python. Each starts the child it asks for."""
    import pathlib

    from rdmaspawn.dropin import forkexec

    seen: list = []
    python_impl = forkexec._preexec_fn

    def counting(owner, *args):
        seen.append(args)
        return python_impl(owner, *args)

    monkeypatch.setattr(forkexec, "_preexec_fn", counting)
    made = forkexec.make_fork_exec(forkexec._cpython_fork_exec())
    assert type(made).__name__ == "fork_exec" and made.__rdmaspawn__ is True

    def start(**named) -> int:
        r, w = os.pipe()
        try:
            pid = made(*_call(r, w, **{"args": [b"true"], "executable_list": [b"/bin/true"],
                                       **named}))
        finally:
            os.close(w)
        try:
            assert os.read(r, 100) == b""  # no error report
        finally:
            os.close(r)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    in_c = [
        {},
        {"args": ["true", "é"], "cwd": "/tmp", "env_list": [b"A=1"], "child_umask": 0o22},
        {"cwd": b"/", "call_setsid": True, "close_fds": False, "restore_signals": False},
        {"fds_to_keep": ()},
        {"args": [pathlib.Path("/bin/true")]},
        {"uid": os.getuid(), "gid": os.getgid()},
        {"p2cread": _Int(-1)},
    ]
    for named in in_c:
        assert start(**named) == 0, named
    assert seen == []
    assert start(preexec_fn=os.setsid) == 0
    assert len(seen) == 1


def test_c_fork_exec_reports_a_failed_exec_as_cpythons_child_does():
    """The C path writes CPython's report into the error pipe: the errno in
    hex and no tag for execve, and returns the failed child's pid."""
    r, w = os.pipe()
    try:
        pid = fork_exec(*_call(r, w))
        os.close(w)
        w = -1
        report = os.read(r, 100)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert report == b"OSError:%x:" % 2  # ENOENT
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 255


def test_c_fork_exec_has_the_parameters_of_fork_exec_call():
    """csrc/python/fork_exec.c's parameter table (its enum, and the names it
    exports) is dropin.cpython.ForkExecCall's, name for name and in order: the C
    object reads each argument where the binding found that name in this
    CPython's call, so a parameter named differently on one side would read
    another argument."""
    from rdmaspawn._native import capi as _capi

    assert _capi.fork_exec_params() == _cpython.ForkExecCall._fields


def test_a_c_table_that_is_not_fork_exec_calls_is_refused(monkeypatch):
    """Where the C names and ForkExecCall's differ, making a fork_exec fails
    loudly instead of handing the C object misplaced positions."""
    import pytest

    from rdmaspawn._native import capi as _capi
    from rdmaspawn.dropin import forkexec

    if _cpython.current() is None:
        pytest.skip("no C fork_exec on this CPython")
    renamed = ("argv",) + _cpython.ForkExecCall._fields[1:]
    monkeypatch.setattr(_capi, "fork_exec_params", lambda: renamed)
    with pytest.raises(RuntimeError, match="argv"):
        forkexec.make_fork_exec(forkexec._cpython_fork_exec())


@pytest.mark.parametrize("n_args, n_env", [(3, 3), (40, 3), (3, 400), (300, 300)])
def test_argv_and_environment_of_every_size_reach_the_child(n_args: int, n_env: int) -> None:
    """The C path keeps the first strings and pointer arrays in its own frame
    and the rest in a list and a PyMem block (csrc/python/convert.c): a child
    gets every argument and variable either way, str and bytes, as under
    CPython's subprocess."""
    import json
    import subprocess
    import sys

    import rdmaspawn

    code = "import json, os, sys; print(json.dumps([sys.argv[1:], dict(os.environ)]))"
    args = [sys.executable, "-c", code] + [f"arg{i}" if i % 2 else f"arg{i}".encode()
                                           for i in range(n_args)]
    env = {f"V{i}": f"value {i}" for i in range(n_env)}
    ours = rdmaspawn.run(args, env=env, capture_output=True, check=True)
    stock = subprocess.run(args, env=env, capture_output=True, check=True)
    assert ours.stdout == stock.stdout
    child_args, child_env = json.loads(ours.stdout)
    assert child_args == [f"arg{i}" for i in range(n_args)]
    assert {k: v for k, v in child_env.items() if k != "LC_CTYPE"} == env  # C locale coercion


_REFUSED = {
    "str executable": {"executable_list": ["/bin/true"]},
    "str env": {"env_list": ["A=1"]},
    "fds_to_keep a list": {"fds_to_keep": []},
    "fds_to_keep unsorted": {"fds_to_keep": (5, 4)},
    "argv not a sequence": {"args": 3},
    "NUL in cwd": {"cwd": "/\0"},
    "str fd": {"p2cread": "0"},
    "fd beyond a C long": {"p2cread": 2**63},
    "fd beyond a C int": {"c2pwrite": 2**40},
    "fd just above a C int": {"p2cread": 2**31},
    "fd just below a C int": {"p2cread": -2**31 - 1},
    "float umask": {"child_umask": 1.5},
    "str restore_signals": {"restore_signals": "yes"},
    "str gid": {"gid": "x"},
    "uid 2**32": {"uid": 2**32},
    "uid 2**64": {"uid": 2**64},
    "too many groups": {"extra_groups": [0] * 65537},
    "groups a tuple": {"extra_groups": (0,)},
    "a str group": {"extra_groups": ["0"]},
    "a group beyond a gid_t": {"extra_groups": [2**32]},
    "errpipe_write below 3": {"errpipe_write": 2},
}


@pytest.mark.parametrize("name", sorted(_REFUSED))
def test_a_call_fork_exec_refuses_is_refused_as_cpythons(name):
    """What CPython's own fork_exec refuses before it starts anything, the C
    one refuses with the same exception and message, and starts nothing."""
    from rdmaspawn.dropin import forkexec

    def outcome(function) -> tuple:
        r, w = os.pipe()
        kids = children()
        try:
            function(*_call(r, w, **{"args": [b"true"], "executable_list": [b"/bin/true"],
                                     **_REFUSED[name]}))
        except Exception as exc:  # noqa: BLE001 - compared as a whole
            return (type(exc), str(exc), children() == kids)
        finally:
            os.close(r)
            os.close(w)
        return ("started",)

    assert outcome(fork_exec) == outcome(forkexec._cpython_fork_exec())


def test_keywords_and_a_wrong_count_are_refused_as_cpythons():
    from rdmaspawn.dropin import forkexec

    theirs = forkexec._cpython_fork_exec()
    for args, kwargs in (((), {"args": 1}), ((1, 2), {})):
        with pytest.raises(TypeError) as expected:
            theirs(*args, **kwargs)
        with pytest.raises(TypeError) as got:
            fork_exec(*args, **kwargs)
        assert str(got.value) == str(expected.value)
