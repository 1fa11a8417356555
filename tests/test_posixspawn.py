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


def test_arguments_are_read_as_signature_bind_reads_them() -> None:
    """The parameters read from _posix_spawn's code object (inspect stays out of
    start-up) bind a call as inspect.Signature.bind does: all positional, as
    _execute_child calls it, or the last one by keyword; a missing or an
    unknown argument is a TypeError on both."""
    params = list(SIGNATURE.parameters)[1:]  # self is not the call's
    values = tuple(f"value-{name}" for name in params)
    bound = dict(SIGNATURE.bind("self", *values).arguments)
    del bound["self"]
    assert posixspawn._bind(SPAWN, values, {}) == bound
    assert list(posixspawn._bind(SPAWN, values, {})) == params
    assert posixspawn._bind(SPAWN, values[:-1], {params[-1]: values[-1]}) == bound

    for args, kwargs in ((values[:-1], {}), (values, {"no_such": 1}),
                         (values, {params[-1]: values[-1]})):
        with pytest.raises(TypeError):
            SIGNATURE.bind("self", *args, **kwargs)
        with pytest.raises(TypeError):
            posixspawn._bind(SPAWN, args, kwargs)


# --- the plain call (csrc/python/posix_spawn.c) -------------------------------

needs_shortcut = pytest.mark.skipif(
    not getattr(subprocess, "_USE_POSIX_SPAWN", False)
    or not getattr(subprocess, "_HAVE_POSIX_SPAWN_CLOSEFROM", False)
    or _cpython.require().posix_spawn_environ,
    reason="Popen(argv) takes the posix_spawn shortcut with the plain call on CPython 3.13+ only")


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
def no_python_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python way to the engine on the posix_spawn path refuses: only
    the C plain call can spawn."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Python path was taken")

    for name in ("spawn_request",):
        monkeypatch.setattr(_engine, name, refuse)


@needs_shortcut
@pytest.mark.usefixtures("no_python_plain")
@pytest.mark.parametrize("argv", [[TRUE], (TRUE,), [TRUE.encode(), "x"]])
def test_the_plain_call_is_spawned_in_c(argv: Any) -> None:
    """Popen(argv) reaches the engine once, through the C builtin alone."""
    before = _engine.spawn_count()
    assert _outcome(lambda: EnginePopen(argv)) == ("exit", 0)
    assert _engine.spawn_count() == before + 1


class Bytes(bytes):
    pass


class Str(str):
    pass


class Argv(list):  # type: ignore[type-arg]
    pass


def _describe(values: dict[str, Any]) -> str:
    return ",".join(f"{name}={type(v).__name__}:{v!r}" for name, v in values.items())


#: Calls that are not plain: the general path converts them (as CPython's
#: would) or raises as posix_spawn does.
NOT_PLAIN = [
    {"args": [TRUE, "a\0b"]}, {"args": [TRUE, b"a\0b"]}, {"args": [TRUE.encode() + b"\0"]},
    {"executable": TRUE + "\0"}, {"executable": TRUE.encode() + b"\0"},
    {"args": []}, {"args": [""]}, {"args": [b""]}, {"args": Argv([TRUE])}, {"args": TRUE},
    {"executable": pathlib.Path(TRUE)}, {"executable": Bytes(TRUE.encode())},
    {"executable": Str(TRUE)}, {"executable": None},
    {"env": {}}, {"p2cread": 3}, {"errwrite": 2}, {"c2pwrite": True},
    {"args": [TRUE, Bytes(b"x")]}, {"args": [Str(TRUE)]}, {"args": [pathlib.Path(TRUE)]},
    {"executable": "/bin/\ud800"}, {"c2pread": -1.0}, {"restore_signals": None},
    {"close_fds": "yes"},
]


@pytest.mark.parametrize("values", [pytest.param(values, id=_describe(values))
                                    for values in NOT_PLAIN])
def test_a_call_that_is_not_plain_is_left_alone(values: dict[str, Any]) -> None:
    """Anything but the plain call answers None, spawns nothing and raises
    nothing: posix_spawn_method's general path then raises what os.posix_spawn
    raises, or spawns."""
    if "close_fds" in values and "close_fds" not in SPAWN.params:
        pytest.skip("_posix_spawn has no close_fds before 3.13")
    before = _engine.spawn_count()
    assert _capi.spawn_posix_plain(_call(**values), SPAWN.positions) is None
    assert _engine.spawn_count() == before


def test_the_c_plain_call_refuses_bad_positions() -> None:
    """A positions table of the wrong size or type, or one pointing outside
    the call, is a TypeError (a bug of posixspawn.py's), not "not plain"."""
    call = _call()
    for positions in (b"", SPAWN.positions[:-1], bytes([len(call)] + [len(call)] * 11),
                      list(SPAWN.positions)):
        with pytest.raises(TypeError):
            _capi.spawn_posix_plain(call, positions)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _capi.spawn_posix_plain(list(call), SPAWN.positions)  # type: ignore[arg-type]
    assert _capi.spawn_posix_plain(call[:-1], SPAWN.positions) is None  # another count


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
    """The general path takes what the plain call leaves: the child gets the
    argument's bytes."""
    out = tmp_path / "out"
    before = _engine.spawn_count()
    argv = ["/bin/sh", "-c", 'printf %s "$1" > "$2"', "sh", Bytes(b"hello"), str(out)]
    assert _outcome(lambda: EnginePopen(argv)) == ("exit", 0)
    assert out.read_bytes() == b"hello"
    assert _engine.spawn_count() == before + 1
