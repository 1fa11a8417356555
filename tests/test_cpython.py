"""rdmaspawn.dropin.cpython: the table of CPython's private internals, and the
refusal of a CPython whose subprocess does not match it."""
from __future__ import annotations

import _posixsubprocess
import inspect
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from rdmaspawn.dropin import cpython as _cpython
from rdmaspawn.dropin.wrapping import innermost


def test_this_cpython_is_known_and_matches():
    """The running CPython is in the table and its _execute_child calls
    fork_exec with the arguments the table names."""
    internals = _cpython.require()
    again = _cpython._looked_up(_cpython.TABLE[sys.version_info[:2]])
    assert internals == again
    # 3.9-3.10: 21; 3.11 added pgid_to_set and allow_vfork; 3.14 dropped allow_vfork.
    expected = 21 if sys.version_info < (3, 11) else 23 if sys.version_info < (3, 14) else 22
    assert len(internals.params) == expected
    module, attr = internals.home
    assert getattr(sys.modules[module], attr) is not None


def test_get_handles_cleanup_is_this_cpythons():
    """Whether Popen._get_handles closes its pipes on a failure is looked up:
    CPython's code for that is the _on_error_fd_closer it added with it, in a
    3.11 patch release (Debian 12's 3.11.2 has none; issue 48, item 3)."""
    assert (_cpython.require().get_handles_cleans_up
            == hasattr(subprocess.Popen, "_on_error_fd_closer"))


def test_rows_a_patch_release_can_change_are_not_in_the_table():
    """home, chdir_tag, get_handles_cleans_up, wrong_count, fork_exec_wording
    and posix_spawn (with its conversion) come from the running CPython only:
    no TABLE entry holds a value for them (issue 48)."""
    looked_up = ("home", "chdir_tag", "get_handles_cleans_up", "wrong_count",
                 "fork_exec_wording", "posix_spawn", "posix_spawn_differs",
                 "preexec_fn_position")
    for version, internals in _cpython.TABLE.items():
        for row in looked_up:
            assert getattr(internals, row) == _cpython.Internals._field_defaults[row], version
    this = _cpython.require()
    assert this.posix_spawn is not None
    assert this.posix_spawn.conversion[2] in ("embedded null byte", _cpython.POSIX_SPAWN_PATH_NUL)
    assert this.chdir_tag in (b"noexec", b"noexec:chdir")


def test_posix_spawn_is_the_one_known_and_placed_by_name():
    """This CPython's _posix_spawn passes the gate; its positions (the C
    side's) name each parameter where it is; one that takes anything else is
    left to CPython, with the reason."""
    internals = _cpython.require()
    spawn = internals.posix_spawn
    assert spawn is not None and internals.posix_spawn_differs == ""
    assert spawn.params == internals.posix_spawn_params
    assert spawn.function is innermost(subprocess.Popen._posix_spawn)  # type: ignore[attr-defined]
    positions = spawn.conversion[0]
    assert positions[0] == len(spawn.params)
    assert [spawn.params[i] for i in positions[1:5]] == [
        "args", "executable", "env", "restore_signals"]
    assert [spawn.params[i] for i in positions[6:]] == list(_cpython._POSIX_SPAWN_FDS)

    class Renamed(subprocess.Popen):  # type: ignore[type-arg]
        def _posix_spawn(self, args, executable, env, restore_signals,  # type: ignore[override]
                         stdin_read, p2cwrite, c2pread, c2pwrite, errread, errwrite):
            raise AssertionError("not called")

    found, why = _cpython._posix_spawn(Renamed, _cpython.TABLE[(3, 9)].posix_spawn_params)
    assert found is None and "stdin_read" in why and "p2cread" in why


def test_preexec_fn_position_is_popens():
    """Where Popen() takes preexec_fn by position, from its own code object."""
    position = _cpython.require().preexec_fn_position
    assert list(inspect.signature(subprocess.Popen).parameters)[position] == "preexec_fn"


def test_the_stand_ins_cover_every_home():
    """Start-up's stand-ins go where dropin.cpython's home of fork_exec is
    looked for: one list (standin.FORK_EXEC_HOMES), and this CPython's home is in it."""
    from rdmaspawn._startup import standin

    assert _cpython.FORK_EXEC_HOMES is standin.FORK_EXEC_HOMES
    assert _cpython.require().home in standin.FORK_EXEC_HOMES


def test_unknown_version_is_refused_by_name():
    """A CPython newer than the table fails at once, naming itself, what still
    works, and what to do."""
    with pytest.raises(_cpython.UnsupportedPython) as refused:
        _cpython._check((3, 99))
    message = str(refused.value)
    for said in ("CPython 3.99", "rdmaspawn.spawn() works", "Upgrade rdmaspawn"):
        assert said in message, message


def test_an_unknown_fork_exec_parser_is_refused(monkeypatch):
    """A fork_exec whose wrong-count TypeError is in neither known wording has
    a parser rdmaspawn has not seen: refused, as an unknown version is."""
    monkeypatch.setattr(_cpython, "_fork_exec_parser", lambda wanted: "")
    with pytest.raises(_cpython.UnsupportedPython, match="parses its arguments"):
        _cpython._check(sys.version_info[:2])


def test_a_free_threaded_build_is_refused_in_one_line():
    """3.14t (no GIL) is refused by name, in one line that says what to use;
    the flag comes from sysconfig's Py_GIL_DISABLED (no 3.14t has run here)."""
    with pytest.raises(_cpython.UnsupportedPython) as refused:
        _cpython._check((3, 14), free_threaded=True)
    message = str(refused.value)
    assert "free-threaded CPython 3.14t" in message and "default (GIL) build" in message
    assert "\n" not in message


@pytest.mark.parametrize("version", sorted(_cpython.TABLE))
def test_unpack_names_every_argument(version, monkeypatch):
    """Every version's call by name: what it passes where it passes it, the
    neutral value for only what it does not pass (3.14's 22 arguments hold
    pgid_to_set but not allow_vfork)."""
    monkeypatch.setattr(_cpython, "_current", _cpython.TABLE[version]._replace(
        wrong_count=_cpython.require().wrong_count))
    params = _cpython.TABLE[version].params
    call = _cpython.unpack_fork_exec(tuple(range(len(params))))
    for field in _cpython.ForkExecCall._fields:
        value = getattr(call, field)
        if field in params:
            assert value == params.index(field), field
        else:
            assert value == {"pgid_to_set": -1, "allow_vfork": True}[field], field
    with pytest.raises(TypeError, match=str(len(params))):
        _cpython.unpack_fork_exec(tuple(range(len(params) + 1)))


# --- the looked-up rows, each against what this CPython does ------------------

def test_wrong_count_is_fork_exec_s_own():
    """The looked-up wording is what CPython's fork_exec says for a count other
    than the one the probe used (it calls with none)."""
    internals = _cpython.require()
    wanted = len(internals.params)
    for given in (wanted - 1, wanted + 1):
        with pytest.raises(TypeError) as raised:
            _posixsubprocess.fork_exec(*range(given))
        assert str(raised.value) == internals.wrong_count.format(wanted=wanted, given=given)


def test_posix_spawn_environ_is_what_popen_passes(monkeypatch):
    """CPython's own Popen._posix_spawn, called with env=None, hands
    os.posix_spawn os.environ exactly where the conversion says so (the
    recorder raises: nothing starts)."""
    method = _cpython_posix_spawn()
    seen = []

    def record(path: Any, argv: Any, env: Any, **kwargs: Any) -> None:
        seen.append(env)
        raise _Stop

    monkeypatch.setattr(os, "posix_spawn", record)
    names = method.__code__.co_varnames[1:method.__code__.co_argcount]
    given = dict(args=[b"/bin/true"], executable=b"/bin/true", env=None,
                 restore_signals=False, close_fds=False)
    with pytest.raises(_Stop):
        method(object.__new__(subprocess.Popen), **{n: given.get(n, -1) for n in names})
    spawn = _cpython.require().posix_spawn
    assert spawn is not None and (seen[0] is os.environ) == (spawn.conversion[-1] is os)
    assert seen[0] is os.environ or seen[0] is None


class _Stop(Exception):
    pass


def _cpython_posix_spawn() -> Any:
    """CPython's Popen._posix_spawn, where patch() has put rdmaspawn's in its place too."""
    from rdmaspawn.dropin import posixspawn

    method = subprocess.Popen._posix_spawn  # type: ignore[attr-defined]
    if method is posixspawn.posix_spawn_method:
        pytest.skip("patched: CPython's Popen._posix_spawn is not in place")
    return method


def test_a_changed_execute_child_is_refused_before_anything_starts():
    """A CPython whose _execute_child passes fork_exec other arguments (here
    one fewer) makes rdmaspawn.Popen and patch() fail at once, naming the
    version, with no child started and no fd left open."""
    code = textwrap.dedent(r"""
        import os, subprocess, sys, types
        src = subprocess.Popen._execute_child
        # The same function with the call's last argument dropped, as a CPython
        # that changed fork_exec's signature would have it.
        import inspect, re, textwrap as tw
        text = tw.dedent(inspect.getsource(src))
        text, n = re.subn(r"umask,(\s+)preexec_fn", r"\1preexec_fn", text, count=1)
        assert n == 1
        ns = dict(vars(subprocess))
        exec(text, ns)
        subprocess.Popen._execute_child = ns["_execute_child"]
        import rdmaspawn
        fds = sorted(os.listdir("/proc/self/fd"))
        out = []
        for call in (lambda: rdmaspawn.Popen(["/bin/true"], stdout=subprocess.PIPE),
                     rdmaspawn.patch):
            try:
                call()
                out.append("ok")
            except Exception as e:
                out.append((type(e).__name__, str(e)))
        out.append(sorted(os.listdir("/proc/self/fd")) == fds)
        out.append(rdmaspawn.is_patched())
        print(repr(out))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    popen, patch, no_fd_leaked, patched = eval(res.stdout)
    version = f"CPython {sys.version_info[0]}.{sys.version_info[1]}"
    for outcome in (popen, patch):
        assert outcome[0] == "UnsupportedPython" and version in outcome[1], outcome
    assert no_fd_leaked and patched is False
