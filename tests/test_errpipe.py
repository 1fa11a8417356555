"""The error pipe kept in memory (rdmaspawn/dropin/errpipe.py,
dropin/execute_child.py, csrc/python/errpipe.c), for rdmaspawn.Popen and for
subprocess under patch(): no pipe is made for it where the fork_exec called
is rdmaspawn's, a real one where it is anything else, CPython's
_execute_child runs otherwise unchanged, and every failure before exec still
raises what CPython raises, with nothing left behind."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import traceback
import types
from pathlib import Path

import pytest
from helpers.process_state import children, open_fds

import rdmaspawn
from rdmaspawn.dropin import cpython, errpipe, execute_child, popen

TRUE = ["/bin/true"]
#: A cwd keeps every CPython on fork_exec, the path with the error pipe
#: (3.13+ would take posix_spawn for a plain call).
VIA_FORK_EXEC = {"cwd": "/"}


def _ours() -> object:
    """The fork_exec rdmaspawn.Popen's method calls (from its globals)."""
    internals = cpython.current()
    assert internals is not None
    module, attr = internals.home
    return popen._NS[attr] if module == "subprocess" else popen._NS[module].fork_exec


def _spawned_method() -> types.FunctionType:
    rdmaspawn.Popen(TRUE).wait()  # the first spawn puts the method in place
    return popen.Popen.__dict__["_execute_child"]  # type: ignore[no-any-return]


def test_the_method_in_force_keeps_the_pipe_in_memory() -> None:
    """On every CPython CI runs, the recompiled method is the one in force,
    with CPython's file, first line and qualified name."""
    method = _spawned_method()
    cpython = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    names = method.__code__.co_names
    assert all(name in names for name in execute_child.NAMES), names
    assert "pipe" not in names and "read" not in names
    assert method.__code__.co_filename == cpython.__code__.co_filename
    assert method.__code__.co_firstlineno == cpython.__code__.co_firstlineno
    assert method.__qualname__ == "Popen._execute_child"
    assert method.__globals__ is popen._NS


def test_a_spawn_makes_no_pipe_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.pipe() is not called for the error pipe: with it failing, rdmaspawn.Popen
    still starts its child, where CPython's Popen fails."""
    _spawned_method()
    monkeypatch.setattr(os, "pipe", _no_pipe)
    with pytest.raises(OSError):
        subprocess.Popen(TRUE, **VIA_FORK_EXEC)
    assert rdmaspawn.Popen(TRUE, **VIA_FORK_EXEC).wait() == 0


def _outcome(popen_class: type, kwargs: dict) -> tuple:
    try:
        proc = popen_class(**kwargs)
    except BaseException as exc:  # noqa: BLE001 - compared as it comes
        return (type(exc).__name__, getattr(exc, "errno", None),
                getattr(exc, "filename", None), str(exc))
    return ("exited", proc.wait())


def _fails(*args: object) -> None:
    raise ValueError("in the child")


FAILURES = {
    "exec ENOENT": {"args": ["/nonexistent/rdmaspawn-x"], **VIA_FORK_EXEC},
    "PATH search": {"args": ["rdmaspawn-no-such-command"]},
    "exec EACCES": {"args": ["/etc/passwd"], **VIA_FORK_EXEC},
    "chdir": {"args": TRUE, "cwd": "/nonexistent-rdmaspawn-dir"},
    "preexec_fn, then exec": {"args": ["/nonexistent/rdmaspawn-x"], "preexec_fn": os.getpid},
    "preexec_fn raises": {"args": TRUE, "preexec_fn": _fails},
    "preexec_fn, then chdir": {"args": TRUE, "cwd": "/nonexistent-rdmaspawn-dir",
                               "preexec_fn": os.getpid},
    "preexec_fn, exits 0": {"args": TRUE, "preexec_fn": os.getpid},
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_each_failure_raises_as_cpython_and_leaves_nothing(case: str) -> None:
    """The failed child's report reaches _execute_child through the pipe in
    memory (the engine's child) or through a real pipe read for it (a
    preexec_fn's forked child): the same exception, errno, filename and
    message as CPython's, with no fd, zombie or pipe left."""
    kwargs = FAILURES[case]
    _spawned_method()
    fds, kids = open_fds(), children()
    theirs = _outcome(subprocess.Popen, kwargs)
    ours = _outcome(rdmaspawn.Popen, kwargs)
    assert ours == theirs
    assert open_fds() == fds and children() == kids
    assert errpipe._pipes == {}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_each_failure_under_patch_raises_as_cpython_and_leaves_nothing(case: str) -> None:
    """The same through subprocess.Popen under patch(), whose _execute_child
    then keeps the pipe in memory too."""
    kwargs = FAILURES[case]
    theirs = _outcome(subprocess.Popen, kwargs)
    fds, kids = open_fds(), children()
    with rdmaspawn.patched():
        ours = _outcome(subprocess.Popen, kwargs)
    assert ours == theirs
    assert open_fds() == fds and children() == kids
    assert errpipe._pipes == {}


def _no_pipe() -> tuple[int, int]:
    raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))


def test_patch_puts_the_method_in_place_and_unpatch_takes_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under patch(), CPython's Popen makes no pipe of its own either; after
    unpatch() its method is as it was, and the module keeps only the calls'
    names (a spawn still inside the method looks them up)."""
    cpython_method = subprocess.Popen.__dict__["_execute_child"]
    names = set(vars(subprocess))
    with rdmaspawn.patched():
        method = subprocess.Popen.__dict__["_execute_child"]
        assert method is not cpython_method
        assert method.__globals__ is vars(subprocess)
        assert (method.__module__, method.__qualname__) == ("subprocess", "Popen._execute_child")
        assert set(vars(subprocess)) == names | set(execute_child.NAMES)
        with monkeypatch.context() as m:
            m.setattr(os, "pipe", _no_pipe)
            assert subprocess.Popen(TRUE, **VIA_FORK_EXEC).wait() == 0
    assert subprocess.Popen.__dict__["_execute_child"] is cpython_method
    assert set(vars(subprocess)) == names | set(execute_child.NAMES)


def test_a_fork_exec_not_rdmaspawns_gets_a_real_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork_exec put in place of rdmaspawn's under patch() (CPython's own
    tests mock it) gets a real pipe, which it may write into: what it writes
    is raised as CPython raises it."""
    internals = cpython.current()
    assert internals is not None
    module, attr = internals.home
    home = subprocess if module == "subprocess" else sys.modules[module]
    at = internals.params.index("errpipe_write")

    def writes_an_error(*args: object) -> int:
        fd = args[at]
        assert isinstance(fd, int) and not errpipe.is_memory(fd)
        os.write(fd, b"OSError:%x:" % errno.EISDIR)
        return 0

    with rdmaspawn.patched():
        monkeypatch.setattr(home, attr, writes_an_error)
        monkeypatch.setattr(os, "waitpid", lambda *a: (0, 0))
        with pytest.raises(IsADirectoryError):
            subprocess.Popen(TRUE, **VIA_FORK_EXEC)
        monkeypatch.undo()
    assert errpipe._pipes == {}


def test_through_the_guards_wrapper_the_pipe_stays_in_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """guard() wraps fork_exec over patch()'s (as RDMASPAWN=on does): its
    wrapper hands the call on unchanged, so the pipe is still kept in memory."""
    internals = cpython.current()
    assert internals is not None
    module, attr = internals.home
    home = subprocess if module == "subprocess" else sys.modules[module]
    with rdmaspawn.patched():
        rdmaspawn.guard("warn")
        try:
            assert getattr(getattr(home, attr), "__rdmaspawn_guard__", False)
            with monkeypatch.context() as m:
                m.setattr(os, "pipe", _no_pipe)
                assert subprocess.Popen(TRUE, **VIA_FORK_EXEC).wait() == 0
        finally:
            rdmaspawn.unguard()


def test_a_traceback_names_cpythons_lines() -> None:
    """The frame of the raise in _execute_child is CPython's file and line."""
    def last_frame(popen_class: type) -> tuple[str, int | None, str]:
        try:
            popen_class(["/nonexistent/rdmaspawn-x"], **VIA_FORK_EXEC)
        except FileNotFoundError as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            return frame.filename, frame.lineno, frame.name
        raise AssertionError("no FileNotFoundError")

    assert last_frame(rdmaspawn.Popen) == last_frame(subprocess.Popen)


def test_the_calls_on_their_own() -> None:
    """pipe() gives numbers no descriptor has; read() gives what write() put
    there, then b''; close() of the read end drops the pipe; an unknown or
    closed end is EBADF; a number below FIRST_FD is os's."""
    assert errpipe.CALLS is not None
    pipe, read, close = errpipe.CALLS
    real_r, real_w, callee = pipe(os.fork)  # not a fork_exec of rdmaspawn's: a real pipe
    assert not errpipe.is_memory(real_r) and os.fstat(real_r) and callee is os.fork
    close(real_r)
    close(real_w)
    r, w, callee = pipe(_ours())
    assert callee is _ours()
    assert r >= errpipe.FIRST_FD and w == r + 1 and errpipe.is_memory(r)
    assert read(r, 10) == b""
    assert errpipe.write(w, b"OSError:2:") == 10
    assert read(r, 3) == b"OSE" and read(r, 50000) == b"rror:2:" and read(r, 5) == b""
    close(w)
    assert read(r, 1) == b""
    close(r)
    with pytest.raises(OSError) as info:
        read(r, 1)
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        errpipe.write(w, b"x")
    assert info.value.errno == errno.EPIPE
    close(r)  # again: nothing to drop
    real_r, real_w = os.pipe()
    os.write(real_w, b"real")
    assert read(real_r, 10) == b"real"
    close(real_w)
    close(real_r)
    with pytest.raises(OSError):
        os.fstat(real_r)
    assert errpipe._pipes == {}


def test_an_exception_during_the_real_pipes_read_is_raised_by_read() -> None:
    """call_with_real_pipe() keeps what stopped its read, for read() to raise
    once, where CPython's own os.read() of the pipe would have raised it."""
    assert errpipe.CALLS is not None
    pipe, read, close = errpipe.CALLS
    r, _, _ = pipe(_ours())
    errpipe._pipes[r] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        read(r, 50000)
    assert read(r, 50000) == b""
    close(r)
    assert errpipe._pipes == {}


def _module_from(tmp_path: Path, name: str, source: str) -> types.ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    sys.path.insert(0, str(tmp_path))
    try:
        return __import__(name)  # stays in sys.modules: code() looks its imports up there
    finally:
        sys.path.remove(str(tmp_path))


#: The call through which _execute_child reaches fork_exec on this CPython.
_HOME = cpython.require().home
_CALL = _HOME[1] if _HOME[0] == "subprocess" else ".".join(_HOME)
METHOD = f"""
    import os
    import _posixsubprocess

    _fork_exec = _posixsubprocess.fork_exec

    class Popen:
        def _execute_child(self):
            low_fds_to_close = []
            errpipe_read, errpipe_write = os.pipe()
            while errpipe_write < 3:
                low_fds_to_close.append(errpipe_write)
                errpipe_write = os.dup(errpipe_write)
            fds_to_keep = set()
            try:
                fds_to_keep.add(errpipe_write)
                self.pid = {_CALL}(
                    errpipe_read, errpipe_write)
            finally:
                os.close(errpipe_write)
            try:
                part = os.read(errpipe_read, 50000)
            finally:
                os.close(errpipe_read)
            return part
"""


def test_code_is_made_only_with_certainty(tmp_path: Path) -> None:
    """A method whose source compiles to its own code gets the five calls
    changed (fork_exec called as the pipe call hands it back); one whose
    file no longer matches it, or that lacks a call (fork_exec's too), or has
    one twice, or names the pipe in one more statement, gets None (Popen then
    runs CPython's, with a real pipe)."""
    good = _module_from(tmp_path, "errpipe_good", METHOD)
    code = execute_child.code(good.Popen._execute_child)
    assert code is not None
    assert set(execute_child.NAMES) <= set(code.co_names)
    assert "_rdmaspawn_fork_exec" in code.co_varnames
    assert code.co_firstlineno == good.Popen._execute_child.__code__.co_firstlineno

    changed = _module_from(tmp_path, "errpipe_changed", METHOD)
    (tmp_path / "errpipe_changed.py").write_text(
        textwrap.dedent(METHOD).replace("50000", "40000"))
    assert execute_child.code(changed.Popen._execute_child) is None

    lacking = _module_from(tmp_path, "errpipe_lacking",
                           METHOD.replace("part = os.read(errpipe_read, 50000)", "part = b''"))
    assert execute_child.code(lacking.Popen._execute_child) is None

    no_call = _module_from(tmp_path, "errpipe_no_call", METHOD.replace(
        f"self.pid = {_CALL}(\n                    errpipe_read, errpipe_write)",
        f"self.pid = {_CALL}"))
    assert execute_child.code(no_call.Popen._execute_child) is None

    twice = _module_from(tmp_path, "errpipe_twice", METHOD.replace(
        "os.close(errpipe_write)", "os.close(errpipe_write)\n                os.close(errpipe_write)"))
    assert execute_child.code(twice.Popen._execute_child) is None

    # The pipe named once more: a number kept in memory would reach os (EBADF).
    once_more = _module_from(tmp_path, "errpipe_once_more", METHOD.replace(
        "fds_to_keep = set()", "fds_to_keep = set()\n            os.set_inheritable(errpipe_write, False)"))
    assert execute_child.code(once_more.Popen._execute_child) is None
