"""rdmaspawn on a CPython whose subprocess it has not seen (issue 49, item 4).

Each case is this CPython's own ``Lib/subprocess.py`` with one change, put
first on the path of a child interpreter, as a distribution's patch or the
next release would bring it. Stock subprocess must still work there (else
the change is wrong, and the case fails saying so); then ``import
rdmaspawn`` must not raise, and ``rdmaspawn.Popen`` and ``patch()`` +
``subprocess.run`` either start the child as CPython does, or refuse with
``UnsupportedPython`` naming what did not match; under ``RDMASPAWN=on`` the
interpreter runs as stock, with one warning line where it refuses.
"""
from __future__ import annotations

import json
import os
import py_compile
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, NamedTuple

import pytest

HERE = Path(__file__).resolve().parent

#: 3.10.5-3.13 have the flag; 3.9, 3.10.0-3.10.4 and 3.14+ have none.
NO_VFORK_FLAG = "this CPython's subprocess has no _USE_VFORK (3.9, 3.10.0-3.10.4, 3.14+)"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RDMASPAWN", "PYTHONPATH", "PYTHONSAFEPATH")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def stock_text() -> str:
    """This CPython's own subprocess.py, from a child: the tests' own
    subprocess may carry rdmaspawn's patch."""
    where = subprocess.run([sys.executable, "-S", "-c", "import subprocess; "
                            "print(subprocess.__file__)"], env=_env(), capture_output=True,
                           text=True, check=True).stdout.strip()
    return Path(where).read_text(encoding="utf-8")


def _sub(text: str, old: str, new: str, count: int = 1) -> str:
    """``text`` with ``old`` replaced; the change is wrong unless it is there ``count`` times."""
    found = text.count(old)
    assert found == count, f"the change expects {old!r} {count} time(s), found {found}"
    return text.replace(old, new)


def _fork_exec_call(text: str) -> tuple[str, int, int]:
    """The name through which _execute_child calls fork_exec, and the span
    of its argument list (from its "(" to its ")")."""
    found = re.findall(r"self\.pid = (_fork_exec|_posixsubprocess\.fork_exec)\(", text)
    assert len(found) == 1, f"the change expects one fork_exec call, found {found}"
    start = text.index(f"self.pid = {found[0]}(") + len(f"self.pid = {found[0]}")
    depth = 0
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            return found[0], start, end
    raise AssertionError("the fork_exec call does not close")


def _with_wrapper(text: str, body: str) -> str:
    """fork_exec called through a Python function ``_fork_exec(*args)`` that
    runs ``body`` with ``fork_exec`` bound to CPython's (3.9-3.10 call the
    C module's directly: the call is pointed at the wrapper)."""
    name, _, _ = _fork_exec_call(text)
    if name != "_fork_exec":
        text = _sub(text, "self.pid = _posixsubprocess.fork_exec(", "self.pid = _fork_exec(")
    fork_exec = "_fork_exec" if name == "_fork_exec" else "_posixsubprocess.fork_exec"
    return text + textwrap.dedent(f"""

        _fork_exec_before = {fork_exec}


        def _fork_exec(*args):
            fork_exec = _fork_exec_before
            {body}
        """)


def errpipe_used_once_more(text: str) -> str:
    text, found = re.subn(r"( +)(errpipe_read, errpipe_write = os\.pipe\(\)\n)",
                          r"\1\2\1os.set_inheritable(errpipe_write, False)\n", text)
    assert found == 1, f"the change expects one os.pipe() of the error pipe, found {found}"
    return text


def posix_spawn_parameter_renamed(text: str) -> str:
    start = text.index("        def _posix_spawn(")
    end = text.index("\n        def ", start + 1)
    method = text[start:end]
    assert method.count("p2cread") >= 2, "the change expects _posix_spawn to take p2cread"
    # _execute_child passes it by position: the call needs no change.
    return text[:start] + method.replace("p2cread", "stdin_read") + text[end:]


def no_vfork_flag(text: str) -> str:
    """3.14 did this: fork_exec's call passes no _USE_VFORK (3.11-3.13 only)."""
    if "preexec_fn, _USE_VFORK)" not in text:
        pytest.skip(f"{NO_VFORK_FLAG}, or its fork_exec call passes none (3.10: read in C)")
    text = _sub(text, "\n_USE_VFORK = True\n", "\n")
    return _sub(text, "preexec_fn, _USE_VFORK)", "preexec_fn, True)")


def no_vfork_flag_read_in_c(text: str) -> str:
    """3.10.5+: fork_exec reads the flag from subprocess, and takes its absence as True."""
    if "\n_USE_VFORK = True\n" not in text or "preexec_fn, _USE_VFORK)" in text:
        pytest.skip(f"{NO_VFORK_FLAG}, or its fork_exec call passes it (3.11-3.13)")
    return _sub(text, "\n_USE_VFORK = True\n", "\n")


def posix_spawn_parameter_added(text: str) -> str:
    found = re.findall(r"def _posix_spawn\(self,[^)]*\)", text)
    assert len(found) == 1, f"the change expects one def _posix_spawn, found {found}"
    return _sub(text, found[0], found[0][:-1] + ", new_parameter=None)")


def popen_keyword_added(text: str) -> str:
    return _sub(text, "pass_fds=(), *, ", "pass_fds=(), *, new_keyword=None, ")


def fork_exec_wrapped(text: str) -> str:
    return _with_wrapper(text, "return fork_exec(*args)")


def vfork_off(text: str) -> str:
    if "\n_USE_VFORK = True\n" not in text:
        pytest.skip(NO_VFORK_FLAG)
    return _sub(text, "\n_USE_VFORK = True\n", "\n_USE_VFORK = False\n")


def posix_spawn_off(text: str) -> str:
    return _sub(text, "\n_USE_POSIX_SPAWN = _use_posix_spawn()\n",
                "\n_USE_POSIX_SPAWN = False\n")


def fork_exec_parameter_added(text: str) -> str:
    text = _with_wrapper(text, "return fork_exec(*args[:-1])")
    _, _, end = _fork_exec_call(text)
    return text[:end] + ", None" + text[end:]


def fork_exec_call_moved(text: str) -> str:
    name, start, end = _fork_exec_call(text)
    text = text[:start - len(name)] + "self._rdmaspawn_test_fork_exec" + text[start:]
    return text + textwrap.dedent(f"""

        def _rdmaspawn_test_fork_exec(self, *args):
            return {name}(*args)


        Popen._rdmaspawn_test_fork_exec = _rdmaspawn_test_fork_exec
        """)


def execute_child_renamed(text: str) -> str:
    assert text.count("_execute_child(") >= 2, "no _execute_child to rename"
    return text.replace("_execute_child(", "_rdmaspawn_test_execute_child(")


class Case(NamedTuple):
    change: Callable[[str], str]
    #: "" where rdmaspawn works with the change; else what its refusal names.
    refused: str = ""
    #: Only a .pyc, whose code names a source file that does not exist.
    sourceless: bool = False


CASES = {
    # The first three: issue 49's table.
    "errpipe_used_once_more": Case(errpipe_used_once_more),
    "posix_spawn_parameter_renamed": Case(posix_spawn_parameter_renamed),
    "no_vfork_flag": Case(no_vfork_flag, refused="it does not pass _USE_VFORK"),
    "no_vfork_flag_read_in_c": Case(no_vfork_flag_read_in_c),
    "posix_spawn_parameter_added": Case(posix_spawn_parameter_added),
    "popen_keyword_added": Case(popen_keyword_added),
    "fork_exec_wrapped": Case(fork_exec_wrapped),
    "vfork_off": Case(vfork_off),
    "no_source_file": Case(lambda text: text, sourceless=True),
    "posix_spawn_off": Case(posix_spawn_off),
    "fork_exec_parameter_added": Case(fork_exec_parameter_added,
                                      refused="passes 2[234] arguments, not 2[123]"),
    "fork_exec_call_moved": Case(fork_exec_call_moved, refused="makes no call of fork_exec"),
    # Not in the issue: what the gate and the drop-in read first is gone.
    "execute_child_renamed": Case(execute_child_renamed, refused="no attribute ._execute_child."),
}

#: What each child reports: exit codes, or the exception's type and message.
REPORT = textwrap.dedent("""\
    import json, subprocess, sys
    where = sys.argv[1]
    assert subprocess.__file__.startswith(where), (subprocess.__file__, where)
    out = {}
    def outcome(name, run):
        try:
            out[name] = run()
        except Exception as exc:
            out[name] = [type(exc).__name__, str(exc)]
    def spawns(popen):
        return [popen(["/bin/sh", "-c", "exit 3"]).wait(),
                popen(["sh", "-c", "exit 4"], cwd="/").wait(),
                popen(["/bin/sh", "-c", "exit 5"], stdout=subprocess.PIPE).wait()]
    def missing(popen):
        try:
            popen(["/nonexistent/rdmaspawn-test"], cwd="/")
        except FileNotFoundError as exc:
            return [exc.errno, exc.filename]
    if sys.argv[2] == "stock":
        outcome("stock", lambda: spawns(subprocess.Popen) + [missing(subprocess.Popen)])
    else:
        import rdmaspawn
        outcome("Popen", lambda: spawns(rdmaspawn.Popen) + [missing(rdmaspawn.Popen)])
        def patched():
            rdmaspawn.patch()
            return [rdmaspawn.is_patched(), subprocess.run(["sh", "-c", "exit 6"]).returncode,
                    subprocess.run(["/bin/sh", "-c", "exit 7"]).returncode,
                    missing(subprocess.Popen)]
        outcome("patch", patched)
    print(json.dumps(out))
""")
MISSING = [2, "/nonexistent/rdmaspawn-test"]


def _changed(tmp_path: Path, text: str, case: Case) -> Path:
    where = tmp_path / "lib"
    where.mkdir()
    source = where / "subprocess.py"
    source.write_text(case.change(text), encoding="utf-8")
    if case.sourceless:
        py_compile.compile(str(source), cfile=str(where / "subprocess.pyc"),
                           dfile=str(tmp_path / "gone" / "subprocess.py"), doraise=True)
        source.unlink()
    return where


def _report(where: Path, how: str, **env: str) -> tuple[dict[str, object], str]:
    done = subprocess.run([sys.executable, "-c", REPORT, str(where), how],
                          env=_env(PYTHONPATH=str(where), **env), capture_output=True,
                          text=True, cwd=HERE, timeout=120)
    assert done.returncode == 0, (how, done.stdout, done.stderr)
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_changed_subprocess_works_or_is_refused_by_name(name: str, stock_text: str,
                                                          tmp_path: Path) -> None:
    """Stock works with the change; rdmaspawn.Popen and patch() start the
    same children with the same exit codes, or refuse naming the mismatch;
    RDMASPAWN=on runs as stock, with one warning line where it refuses."""
    case = CASES[name]
    where = _changed(tmp_path, stock_text, case)
    stock, _ = _report(where, "stock")
    assert stock["stock"] == [3, 4, 5, MISSING], f"the change broke stock code: {stock}"

    ours, said = _report(where, "rdmaspawn")
    assert said == ""
    if not case.refused:
        assert ours == {"Popen": [3, 4, 5, MISSING], "patch": [True, 6, 7, MISSING]}, ours
    else:
        for what in ("Popen", "patch"):
            kind, message = ours[what]  # type: ignore[misc]
            assert kind == "UnsupportedPython", ours
            assert re.search(case.refused, message), (case.refused, message)

    on, said = _report(where, "stock", RDMASPAWN="on")
    assert on == stock
    lines = said.splitlines()
    if case.refused:
        assert len(lines) == 1 and "UnsupportedPython" in lines[0], said
        assert re.search(case.refused, lines[0]), said
    else:
        assert lines == [], said
