"""dropin/posixspawn.py: Popen._posix_spawn on the engine, its arguments read by name."""
from __future__ import annotations

import inspect
import pathlib
import subprocess
from typing import Any, Callable

import pytest

from rdmaspawn._native import capi as _capi
from rdmaspawn._native import engine as _engine
from rdmaspawn.dropin import cpython as _cpython
from rdmaspawn.dropin import posixspawn

SIGNATURE = inspect.signature(subprocess.Popen._posix_spawn)  # type: ignore[attr-defined]
#: _posix_spawn as dropin.cpython's gate found it (the one rdmaspawn knows).
SPAWN = _cpython.require().posix_spawn
assert SPAWN is not None
TRUE = "/bin/true"


def test_a_call_is_bound_as_cpythons_own_binds_it() -> None:
    """A call of another shape (by keyword, too many, too few, unknown or
    repeated names) is bound as CPython's own _posix_spawn binds it: the same
    positional call, or the same TypeError in the same words. Before, rdmaspawn
    said it in words of its own."""
    params = SPAWN.params
    values = tuple(f"value-{name}" for name in params)
    self = object.__new__(subprocess.Popen)

    def bound(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            arguments = SIGNATURE.bind(self, *args, **kwargs).arguments
            return tuple(arguments[name] for name in params)
        except TypeError:
            pass
        try:  # refused as it binds: CPython's own never runs its body here
            SPAWN.function(self, *args, **kwargs)
        except TypeError as exc:
            return ("TypeError", str(exc))
        raise AssertionError("bound by inspect, not by CPython")  # pragma: no cover

    def ours(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return posixspawn._bind(SPAWN, self, args, kwargs)
        except TypeError as exc:
            return ("TypeError", str(exc))

    cases = [
        (values, {}),
        (values[:-1], {params[-1]: values[-1]}),
        ((), dict(zip(params, values))),
        (values + (1,), {}),
        (values[:-1], {}),
        (values[:-2], {}),
        (values[:-3], {}),
        (values, {"no_such": 1}),
        (values, {params[0]: 1}),
        (values + (1,), {"no_such": 1}),
    ]
    for args, kwargs in cases:
        assert ours(args, kwargs) == bound(args, kwargs), (args, kwargs)


# --- the call in C (csrc/python/convert.c) ------------------------------------

needs_shortcut = pytest.mark.skipif(
    not getattr(subprocess, "_USE_POSIX_SPAWN", False)
    or not getattr(subprocess, "_HAVE_POSIX_SPAWN_CLOSEFROM", False)
    or SPAWN.conversion[-1] is not None,
    reason="Popen(argv) takes the posix_spawn shortcut on CPython 3.13+ only")


class Bytes(bytes):
    pass


class Str(str):
    pass


class Argv(list):  # type: ignore[type-arg]
    pass


class EnginePopen(subprocess.Popen):  # type: ignore[type-arg]
    """subprocess.Popen with the engine's _posix_spawn, as patch() puts it
    there, for this class alone (stock subprocess stays as it is)."""

    _posix_spawn = posixspawn.posix_spawn_method


def _call(**values: Any) -> tuple[Any, ...]:
    """A positional _posix_spawn call, as _execute_child makes it for
    Popen([TRUE]), with ``values`` put in by parameter name."""
    plain = {"args": [TRUE], "executable": TRUE, "env": None, "restore_signals": True,
             "close_fds": True, "p2cread": -1, "p2cwrite": -1, "c2pread": -1,
             "c2pwrite": -1, "errread": -1, "errwrite": -1}
    plain.update(values)
    return tuple(plain[name] for name in SPAWN.params)


def _outcome(make: Callable[[], subprocess.Popen[Any]]) -> tuple[Any, ...]:
    """What a Popen gave: its return code, or its exception's type and args
    and filename."""
    try:
        with make() as proc:
            return ("exit", proc.wait())
    except Exception as exc:  # noqa: BLE001 - compared as a whole
        return (type(exc), exc.args, getattr(exc, "filename", None))


@pytest.fixture
def no_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python way to the engine refuses: only the C call can spawn."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Python path was taken")

    for name in ("spawn_request",):
        monkeypatch.setattr(_engine, name, refuse)


@needs_shortcut
@pytest.mark.usefixtures("no_python_path")
@pytest.mark.parametrize("argv", [[TRUE], (TRUE,), [TRUE.encode(), "x"], [TRUE, Bytes(b"x")]])
def test_the_call_is_spawned_in_c(argv: Any) -> None:
    """Popen(argv) reaches the engine once, through the C builtin alone."""
    before = _engine.spawn_count()
    assert _outcome(lambda: EnginePopen(argv)) == ("exit", 0)
    assert _engine.spawn_count() == before + 1


def test_the_c_call_refuses_a_bad_conversion() -> None:
    """A conversion tuple of the wrong shape, positions pointing outside the
    call, or a call of another length is a TypeError (a bug of
    posixspawn.py's), and starts nothing."""
    call, conversion = _call(), SPAWN.conversion
    before = _engine.spawn_count()
    known = SPAWN.conversion[0]
    for positions in (b"", known[:-1], bytes([len(call)] + [len(call)] * 11), list(known)):
        with pytest.raises(TypeError):
            _capi.spawn_posix(call, (positions, *conversion[1:]))
    for args in ((list(call), conversion), (call, conversion[:-1]), (call[:-1], conversion)):
        with pytest.raises(TypeError):
            _capi.spawn_posix(*args)  # type: ignore[arg-type]
    assert _engine.spawn_count() == before


@needs_shortcut
@pytest.mark.parametrize("popen", [
    pytest.param(lambda cls: cls([TRUE, "a\0b"]), id="NUL in an argument"),
    pytest.param(lambda cls: cls([TRUE.encode(), b"a\0b"]), id="NUL in a bytes argument"),
    pytest.param(lambda cls: cls([""], executable=TRUE), id="empty argv[0]"),
    pytest.param(lambda cls: cls([b""], executable=TRUE.encode()), id="empty bytes argv[0]"),
    pytest.param(lambda cls: cls(["true"], executable=TRUE + "\0"), id="NUL in the executable"),
    pytest.param(lambda cls: cls([TRUE, Bytes(b"x")]), id="bytes subclass"),
    pytest.param(lambda cls: cls(["true"], executable=pathlib.Path(TRUE)), id="PathLike executable"),
    pytest.param(lambda cls: cls([pathlib.Path(TRUE)]), id="PathLike argv"),
    pytest.param(lambda cls: cls(["/no/such/program"]), id="missing"),
    pytest.param(lambda cls: cls([b"/no/such/program"]), id="missing, bytes"),
    pytest.param(lambda cls: cls(["x"], executable=Str("/no/such/program")), id="missing, str subclass"),
    pytest.param(lambda cls: cls(["/"]), id="a directory"),
    pytest.param(lambda cls: cls([TRUE], executable="/etc/passwd"), id="not executable"),
])
def test_the_outcome_is_stock_subprocess(popen: Callable[[type], Any]) -> None:
    """Each call ends as it does with CPython's own _posix_spawn: the same
    exception (type, args, filename: the executable as given), or the same
    exit status."""
    stock = _outcome(lambda: popen(subprocess.Popen))
    assert _outcome(lambda: popen(EnginePopen)) == stock


@needs_shortcut
def test_a_bytes_subclass_argument_reaches_the_child(tmp_path: pathlib.Path) -> None:
    """A bytes subclass is converted as the bytes it is: the child gets them."""
    out = tmp_path / "out"
    before = _engine.spawn_count()
    argv = ["/bin/sh", "-c", 'printf %s "$1" > "$2"', "sh", Bytes(b"hello"), str(out)]
    assert _outcome(lambda: EnginePopen(argv)) == ("exit", 0)
    assert out.read_bytes() == b"hello"
    assert _engine.spawn_count() == before + 1


# --- bad arguments: refused as CPython's own _posix_spawn refuses them --------

class _Refuses:
    """A value whose truth or comparison raises."""

    def __bool__(self) -> bool:
        raise ZeroDivisionError("no truth")

    def __ne__(self, other: object) -> bool:
        raise ZeroDivisionError("no comparison")


class _Env(dict):  # type: ignore[type-arg]
    """A mapping whose keys() is not a list of the keys."""

    def keys(self) -> Any:
        return 5


#: One bad value each (or two, for the order), by parameter name; the rest
#: is _call()'s Popen([TRUE]).
_BAD: dict[str, dict[str, Any]] = {
    "argv empty": {"args": []}, "argv a str": {"args": TRUE}, "argv None": {"args": None},
    "argv an int item": {"args": [TRUE, 5]}, "argv NUL": {"args": [TRUE, "a\0b"]},
    "argv bytes NUL": {"args": [TRUE, b"a\0b"]}, "argv[0] empty": {"args": [""]},
    "argv[0] empty bytes": {"args": [b""]}, "argv a list subclass": {"args": Argv([TRUE])},
    "argv a PathLike": {"args": [pathlib.Path(TRUE)]}, "argv a surrogate": {"args": ["\ud800"]},
    "executable NUL": {"executable": TRUE + "\0"},
    "executable bytes NUL": {"executable": TRUE.encode() + b"\0"},
    "executable an int": {"executable": 5}, "executable None": {"executable": None},
    "executable a PathLike": {"executable": pathlib.Path(TRUE)},
    "executable missing": {"executable": "/no/such/program"},
    "executable a directory": {"executable": "/"},
    "executable a surrogate": {"executable": "/bin/\ud800"},
    "env empty": {"env": {}}, "env an int": {"env": 5}, "env a list": {"env": [("A", "B")]},
    "env an int value": {"env": {"A": 1}}, "env an empty name": {"env": {"": "x"}},
    "env = in a name": {"env": {"A=B": "x"}}, "env = first": {"env": {"=A": "x"}},
    "env NUL": {"env": {"A": "a\0"}}, "env bytes": {"env": {b"A": b"B"}},
    "env keys() no list": {"env": _Env(A="B")},
    "restore_signals refuses truth": {"restore_signals": _Refuses()},
    "restore_signals None": {"restore_signals": None},
    "close_fds refuses truth": {"close_fds": _Refuses()},
    "close_fds None": {"close_fds": None}, "close_fds 0.0": {"close_fds": 0.0},
    "p2cread a float": {"p2cread": 1.5}, "p2cread a str": {"p2cread": "3"},
    "p2cread None": {"p2cread": None}, "p2cread too big": {"p2cread": 2**31},
    "p2cread too small": {"p2cread": -2**31 - 1}, "p2cread beyond a long": {"p2cread": 2**64},
    "p2cread -2": {"p2cread": -2}, "p2cread past the limit": {"p2cread": 10**8},
    "p2cread not open": {"p2cread": 1000}, "p2cread -1.0": {"p2cread": -1.0},
    "p2cread refuses comparison": {"p2cread": _Refuses()},
    "p2cwrite -2": {"p2cwrite": -2}, "p2cwrite a float": {"p2cwrite": 1.5},
    "c2pread past the limit": {"c2pread": 10**8}, "errwrite too big": {"errwrite": 2**31},
    "c2pwrite True": {"c2pwrite": True},
    "executable then argv": {"executable": 5, "args": []},
    "argv then env": {"args": [TRUE, 5], "env": 5},
    "env then fds": {"env": {"A": 1}, "p2cread": 1.5},
    "argv item then argv[0] empty": {"args": ["", 5]},
    "restore_signals then fds": {"restore_signals": _Refuses(), "p2cread": 1.5},
    "fds in order": {"errread": 1.5, "p2cwrite": "3"},
}


def _spawned(method: Callable[..., None], call: tuple[Any, ...]) -> tuple[Any, ...]:
    """What ``method`` (a _posix_spawn) did with ``call``: the exception it raised
    (type, message, filename), or the child's exit status; and whether no child
    is left behind."""
    from helpers.process_state import children

    before = children()
    popen = object.__new__(subprocess.Popen)
    popen.returncode = 0  # no ResourceWarning from __del__: the test waits for it
    try:
        method(popen, *call)
    except Exception as exc:  # noqa: BLE001 - compared as a whole
        return (type(exc), str(exc), getattr(exc, "filename", None), children() == before)
    return ("exit", subprocess.os.waitpid(popen.pid, 0)[1], children() == before)


@pytest.mark.parametrize("name", list(_BAD))
def test_a_bad_argument_is_refused_as_cpythons(name: str) -> None:
    """Each bad value ends as it ends in CPython's own _posix_spawn: the same
    exception, message and filename, raised before any child is started; a
    value CPython takes starts the same child."""
    values = _BAD[name]
    if "close_fds" in values and "close_fds" not in SPAWN.params:
        pytest.skip("_posix_spawn has no close_fds before 3.13")
    call = _call(**values)
    assert _spawned(posixspawn.posix_spawn_method, call) == _spawned(SPAWN.function, call)


def test_a_call_by_keyword_is_cpythons() -> None:
    """The call by keyword binds as CPython's does, and starts the same child."""
    call = dict(zip(SPAWN.params, _call(args=[TRUE, 5])))
    for method in (posixspawn.posix_spawn_method, SPAWN.function):
        with pytest.raises(TypeError) as raised:
            method(object.__new__(subprocess.Popen), **call)
        assert "expected str, bytes or os.PathLike object, not int" in str(raised.value)
