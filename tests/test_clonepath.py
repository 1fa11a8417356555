"""RDMASPAWN_CLONE and the clone path the engine reports: the variable really
moves every spawn of a process (and its helper interpreters) to glibc clone()."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

# One real spawn through the drop-in, then the path the engine took.
_SPAWN_THEN_REPORT = (
    "import subprocess, rdmaspawn; from rdmaspawn import _engine; rdmaspawn.patch(); "
    "before = _engine.spawn_count(); "
    "subprocess.run([sys.executable, '-c', 'pass'], check=True); "
    "assert _engine.spawn_count() == before + 1; print(_engine.clone_path().method)"
)


def _run(code: str, value: str | None, *prefix: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("RDMASPAWN_CLONE", None)
    if value is not None:
        env["RDMASPAWN_CLONE"] = value
    return subprocess.run([*prefix, sys.executable, "-c", "import sys; " + code],
                          env=env, capture_output=True, text=True, timeout=120)


def test_variable_moves_spawns_to_clone() -> None:
    """RDMASPAWN_CLONE=clone: a spawn through patch() takes glibc clone(); unset or
    'auto', the same spawn takes clone3() (every kernel this runs on has it)."""
    forced = _run(_SPAWN_THEN_REPORT, "clone")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.split() == ["clone"]
    for value in (None, "auto"):
        plain = _run(_SPAWN_THEN_REPORT, value)
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout.split() == ["clone3"], value


def test_unknown_value_warns_and_is_auto() -> None:
    """A value that is neither 'auto' nor 'clone' is reported once and ignored."""
    r = _run("import warnings; warnings.simplefilter('always'); " + _SPAWN_THEN_REPORT, "clone4")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["clone3"]
    assert r.stderr.count("RDMASPAWN_CLONE='clone4' is not one of auto, clone") == 1


def test_untried_path_is_probed_without_running_a_program() -> None:
    """clone_path() in a process that has not spawned clones one child to find
    out, whose exec fails: the answer is clone3 or clone, never 'untried'.
    Forced, the answer is known without a spawn."""
    code = ("from rdmaspawn import _engine, _clonepath; "
            "print(_clonepath.clone_path().method, _engine.clone_path().method, "
            "_engine.spawn_count())")
    assert _run(code, None).stdout.split() == ["untried", "clone3", "1"]
    assert _run(code, "clone").stdout.split() == ["clone", "clone", "0"]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_forced_spawn_calls_clone_not_clone3() -> None:
    """What the kernel sees: forced, the spawn is a clone(CLONE_VM|CLONE_VFORK)
    system call and no clone3(); unforced, a clone3() with those flags."""
    code = ("from rdmaspawn import _engine; "
            "_engine.spawn([b'true'], [b'/bin/true', b'/usr/bin/true'])")
    trace = ["strace", "-f", "-qq", "-e", "trace=clone,clone3", "-e", "signal=none"]
    forced = _run(code, "clone", *trace)
    plain = _run(code, None, *trace)
    if "PTRACE" in forced.stderr or "Operation not permitted" in forced.stderr:
        pytest.skip("ptrace is not allowed here")
    vfork = [line for line in forced.stderr.splitlines() if "CLONE_VFORK" in line]
    assert len(vfork) == 1 and vfork[0].startswith(("clone(", "[pid")), forced.stderr
    assert "clone3(" not in forced.stderr, forced.stderr
    vfork = [line for line in plain.stderr.splitlines() if "CLONE_VFORK" in line]
    assert len(vfork) == 1 and "clone3(" in vfork[0], plain.stderr
