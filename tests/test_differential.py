"""Differential testing: rdmaspawn against CPython over the whole argument space.

Hypothesis draws requests, bad and edge values included (negative fds,
2**31, 2**32-1, 2**32, 2**63, NUL, "", "=", non-UTF-8, closed fds, fds 0-2
closed in the parent, huge lists), for ``Popen`` and for ``os.spawnv*``.
A child interpreter (tests/children/differential_worker.py) runs each one through
CPython and through rdmaspawn and reports both outcomes: the exception's
type, errno, filename and message, or the exit status and output. They must
be equal, and rdmaspawn must leave no fd and no child behind.

Bounded for CI: a fixed number of examples, derandomized (the same examples
on every run), no example database, no deadline; about 10 s per Python.
hypothesis is in the ``test`` extra: a missing one fails, never skips.
"""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rdmaspawn._host.interpreter import python_command

EXAMPLES = 300

_INTS = [-2**63 - 1, -2**40, -2**31 - 1, -7, -2, -1, 0, 1, 2, 2**31 - 1, 2**31, 2**32 - 1,
         2**32, 2**40, 2**63, 2**64]
_FDS = st.sampled_from([None, subprocess.PIPE, subprocess.DEVNULL, 0, 1, 2, 4000] + _INTS)
_TEXT = st.sampled_from(["", "=", "a", "a=b", "=a", "a\0b", "\0", "\udcff", "\ud800", "é",
                         b"", b"\xff", b"a\0", b"x", 3, 2**63])
_IDS = st.sampled_from([None, 0, 65534] + _INTS)
_PROGRAMS = st.sampled_from(["/bin/echo", "echo", "/bin/sh", "/bin/true", "/nonexistent/x",
                             "no-such-rdmaspawn", "/tmp", "", "/bin/tr\0ue", b"/bin/echo",
                             b"\xff/x", "/etc/passwd", 3])
_GROUPS = st.one_of(
    st.none(),
    st.lists(st.sampled_from([0, 65534] + _INTS), max_size=3),
    st.just([0] * 65537),
    st.just([0] * 65536),
)
# Past the kernel's limits (E2BIG): one huge argument, or very many.
_HUGE_ARGS = st.sampled_from([["x" * (3 << 20)], ["x"] * 300_000])
_ENV = st.one_of(st.none(), st.dictionaries(_TEXT.filter(lambda k: not isinstance(k, int)),
                                            _TEXT, max_size=3))


@st.composite
def popen_requests(draw: st.DrawFn) -> tuple:
    program = draw(_PROGRAMS)
    args = [program] + draw(st.one_of(st.lists(_TEXT, max_size=3), _HUGE_ARGS))
    kw: dict = {}
    for name, values in [
        ("stdin", _FDS), ("stdout", _FDS),
        ("stderr", st.one_of(_FDS, st.just(subprocess.STDOUT))),
        ("env", _ENV),
        ("cwd", st.sampled_from([None, "/", "/nonexistent", "/etc/passwd", "a\0", b"/tmp"])),
        ("close_fds", st.booleans()),
        ("pass_fds", st.sampled_from([(), (4000,), (-3,), (2**31,)])),
        ("user", _IDS), ("group", _IDS), ("extra_groups", _GROUPS),
        ("umask", st.sampled_from([-1, 0o22, 2**31, 2**40])),
        ("start_new_session", st.booleans()),
        ("restore_signals", st.booleans()),
        ("executable", st.sampled_from([None, "/bin/echo", "/nonexistent/x", "", "/bin/e\0"])),
    ] + ([("process_group", st.sampled_from([-1, 0, 2**31, 2**40]))]
         if sys.version_info >= (3, 11) else []):
        if draw(st.booleans()):
            kw[name] = draw(values)
    if kw.get("stdout") is None and draw(st.booleans()):
        kw["stdout"] = subprocess.PIPE  # compare what the child prints
    closed = draw(st.lists(st.sampled_from([0, 1, 2]), unique=True, max_size=3))
    return ("popen", args, kw, sorted(closed))


@st.composite
def spawnv_requests(draw: st.DrawFn) -> tuple:
    func = draw(st.sampled_from(["execv", "execve", "execvp", "execvpe"]))
    args = draw(st.one_of(st.lists(_TEXT, max_size=3), st.just("true"),
                          st.just(["sh", "-c", "exit 7"])))
    kw = {"file": draw(_PROGRAMS), "func": func,
          "env": draw(_ENV) if func.endswith("e") else None}
    return ("spawnv", args, kw, [])


def _names_a_closed_std_fd(request: tuple) -> bool:
    """Whether stdin/stdout/stderr names one of fds 0-2 that the parent closed.

    There rdmaspawn differs on purpose (docs/cpython-differences.md;
    tests/test_errors.py pins it): CPython's child dup()s fds out of the way
    and a dup lands on the free low fd, so the closed fd the caller named is
    silently wired to another file; rdmaspawn says EBADF.
    """
    api, _args, kw, closed = request
    return api == "popen" and any(
        type(kw.get(name)) is int and kw[name] in closed
        for name in ("stdin", "stdout", "stderr"))


def _pgid_truncated_by_cpython(request: tuple) -> bool:
    """CPython 3.12 truncates a process_group beyond a C int (2**40 -> 0, a
    new group); rdmaspawn raises OverflowError, as 3.11 and 3.13 do."""
    pgid = request[2].get("process_group", -1)
    return sys.version_info[:2] == (3, 12) and not -2**31 <= pgid < 2**31


class _Worker:
    def __init__(self) -> None:
        to_worker, self._feed = os.pipe()
        self._results, from_worker = os.pipe()
        code = ("import runpy, sys; sys.argv[0] = {!r}; "
                "runpy.run_path(sys.argv[0], run_name='__main__')").format(
                    os.path.join(os.path.dirname(__file__), "children", "differential_worker.py"))
        self.proc = subprocess.Popen(
            python_command(code, str(to_worker), str(from_worker)),
            pass_fds=(to_worker, from_worker), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_worker)
        os.close(from_worker)

    def run(self, request: tuple) -> tuple:
        data = pickle.dumps(request)
        os.write(self._feed, struct.pack("<I", len(data)) + data)
        head = self._read(4)
        return pickle.loads(self._read(struct.unpack("<I", head)[0]))  # type: ignore[no-any-return]

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            part = os.read(self._results, n - len(buf))
            if not part:
                self.proc.wait(timeout=30)
                raise AssertionError("the worker died: " + self.proc.stderr.read().decode())
            buf += part
        return buf

    def close(self) -> None:
        os.close(self._feed)
        os.close(self._results)
        self.proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def worker():
    w = _Worker()
    yield w
    w.close()


_SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                     suppress_health_check=list(HealthCheck), print_blob=False)


def _check(worker: _Worker, request: tuple) -> None:
    (theirs, _, _), (ours, our_fds, our_kids) = worker.run(request)
    if ours != theirs:
        if _pgid_truncated_by_cpython(request):
            assert ours[0] == "OverflowError", (request, ours, theirs)
        elif _names_a_closed_std_fd(request):
            assert ours[:2] == ("OSError", 9), (request, ours, theirs)
        else:
            assert ours == theirs, request
    assert (our_fds, our_kids) == ([], []), request


@_SETTINGS
@given(request=popen_requests())
def test_popen_same_as_cpython(worker: _Worker, request: tuple) -> None:
    """rdmaspawn.Popen raises or runs exactly as subprocess.Popen, and leaks nothing."""
    _check(worker, request)


@_SETTINGS
@given(request=spawnv_requests())
def test_spawnv_same_as_cpython(worker: _Worker, request: tuple) -> None:
    """os.spawnv* on the engine returns or raises exactly as CPython's."""
    _check(worker, request)


#: Values Popen's three flags may be given: bools, other ints, falsy and
#: truthy non-ints, a number past a C int. What each CPython accepts differs
#: (Argument Clinic's bool on 3.12+ takes any truth value; "i" before takes
#: ints that fit a C int, where posix_spawn's path takes any truth value).
_FLAG_VALUES = [None, 0, 0.0, 1, True, False, "yes", "", 1.5, 2**40, -1]
#: "/bin/true" takes posix_spawn's path where CPython would (close_fds falsy,
#: or 3.13+); "true" is searched on PATH and always takes fork_exec's.
_FLAG_PROGRAMS = (["/bin/true"], ["true"])


def _flag_outcome(popen_class: type, program: list[str], flag: str, value: object) -> tuple:
    try:
        proc = popen_class(program, **{flag: value})
    except Exception as exc:  # noqa: BLE001 - compared as it comes
        return (type(exc).__name__, str(exc))
    return ("exited", proc.wait())


@pytest.mark.parametrize("flag", ["close_fds", "restore_signals", "start_new_session"])
def test_flag_values_same_as_cpython(flag: str) -> None:
    """Each value of close_fds, restore_signals and start_new_session, through
    rdmaspawn.Popen and through subprocess.Popen under patch(), is taken or
    refused exactly as this CPython's own subprocess takes or refuses it (the
    same exception type and message, else the same exit status)."""
    import rdmaspawn

    differ = []
    for program in _FLAG_PROGRAMS:
        for value in _FLAG_VALUES:
            stock = _flag_outcome(subprocess.Popen, program, flag, value)
            ours = _flag_outcome(rdmaspawn.Popen, program, flag, value)
            with rdmaspawn.patched():
                patched = _flag_outcome(subprocess.Popen, program, flag, value)
            if not stock == ours == patched:
                differ.append((program[0], value, stock, ours, patched))
    assert differ == []


def test_spawnv_conversion_errors_same_as_cpython() -> None:
    """os.spawn* under patch(), P_WAIT and P_NOWAIT: what CPython checks
    before it forks (argv's type, argv[0] empty or whose truth raises) raises
    in the caller; anything raised converting the rest (a __fspath__ that
    raises, OSError included; an env mapping whose keys() raise, or holding
    values of the wrong type; a PATH search over such an env) raises in
    CPython's forked child, which exits 127: the same here."""
    from helpers.child import run_json

    out = run_json("""
        import json, os, rdmaspawn

        class Path:
            def __init__(self, exc): self.exc = exc
            def __fspath__(self): raise self.exc

        class BadKeys(dict):
            def keys(self): raise RuntimeError("keys")

        class BadTruth(str):
            def __bool__(self): raise RuntimeError("truth")

        CASES = [
            ("spawnv", "/bin/true", ["true"]),
            ("spawnv", "/bin/false", ["false"]),
            ("spawnv", "/bin/true", "true"),
            ("spawnv", "/bin/true", []),
            ("spawnv", "/bin/true", [""]),
            ("spawnv", "/bin/true", [BadTruth("x")]),
            ("spawnv", Path(RuntimeError("x")), ["true"]),
            ("spawnv", Path(OSError(5, "x")), ["true"]),
            ("spawnv", "/bin/true", ["true", Path(OSError(5, "x"))]),
            ("spawnv", "/bin/true", [Path(KeyError("x"))]),
            ("spawnve", "/bin/true", ["true"], BadKeys(A="1")),
            ("spawnve", "/bin/true", ["true"], {"A": Path(OSError(5, "x"))}),
            ("spawnve", "/bin/true", ["true"], {"A": 1}),
            ("spawnve", "/bin/true", ["true"], {"A": [1]}),
            ("spawnve", "/bin/true", ["true"], 3),
            ("spawnvp", Path(OSError(5, "x")), ["true"]),
            ("spawnvpe", "true", ["true"], BadKeys(PATH="/bin")),
            ("spawnvpe", "true", ["true"], {"PATH": Path(LookupError("x"))}),
            ("spawnvpe", "true", ["true"], {"PATH": "/bin"}),
        ]

        def outcome(mode, name, *args):
            try:
                got = getattr(os, name)(mode, *args)
            except Exception as exc:
                return [type(exc).__name__, str(exc)]
            if mode == os.P_NOWAIT:
                got = os.waitstatus_to_exitcode(os.waitpid(got, 0)[1])
            return ["exited", got]

        differ = []
        for mode in (os.P_WAIT, os.P_NOWAIT):
            for case in CASES:
                stock = outcome(mode, *case)
                with rdmaspawn.patched():
                    ours = outcome(mode, *case)
                if ours != stock:
                    differ.append([mode, repr(case), stock, ours])
        print(json.dumps(differ))
    """)
    assert out == []
