"""A Pool whose worker handler cannot start a replacement fails its waiting results, never hangs.

The pool is made (fork: the default on 3.9-3.13, chosen here for 3.14+'s
forkserver default) before the process takes DONTFORK memory;
maxtasksperchild=1 makes its handler thread fork replacements afterwards, while
map() waits (chunksize=1: with no worker alive, map's own chunksize arithmetic
divides by zero).
guard("raise") refuses those forks. Without rdmaspawn.dropin.poolhandler the
handler thread dies and map() waits forever (the control, with a refusal of
its own, bounded by a timeout); with it (installed by guard(), however that
was turned on), map() raises ForkHazardError and the pool is closed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_SCRIPT = textwrap.dedent("""\
    import faulthandler, multiprocessing, os, sys
    import rdmaspawn
    from rdmaspawn.testing.hazard import plant
    def square(x):
        return x * x
    if __name__ == "__main__":
        how = sys.argv[1]
        if how == "install":
            from rdmaspawn.dropin.poolhandler import install
            install()
        if how != "plain":  # "hook": RDMASPAWN has guarded already; this changes nothing
            rdmaspawn.patch()
            rdmaspawn.guard("raise")
        # Both workers are forked here, before the hazard; each exits after one task.
        with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
            plant("auto")
            if how == "plain":  # the control: a refused fork without rdmaspawn's handler
                def refuse():
                    raise BlockingIOError(11, "fork refused")
                os.fork = refuse
            for what in ("map", "apply_async"):
                try:
                    print(what, "returned", pool.map(square, range(8), chunksize=1)
                          if what == "map"
                          else pool.apply_async(square, (3,)).get(60), flush=True)
                except Exception as exc:
                    print(what, "raised", type(exc).__name__, flush=True)
        print("done", flush=True)
""")


def run(tmp: Path, how: str, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    script = tmp / "late_pool.py"
    script.write_text(_SCRIPT)
    return subprocess.run([sys.executable, str(script), how], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp, env=env)


def test_installed_directly(tmp_path: Path) -> None:
    r = run(tmp_path, "install")
    assert r.stdout.splitlines() == ["map raised ForkHazardError", "apply_async raised ValueError",
                                     "done"], r.stderr


def test_installed_by_guard_in_code(tmp_path: Path) -> None:
    """``rdmaspawn.patch(); rdmaspawn.guard("raise")`` in the program, no
    RDMASPAWN: the handler comes with the guard however it was turned on
    (the pool hung: the handler came only with RDMASPAWN's guard)."""
    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    r = run(tmp_path, "code", env=env, timeout=60)
    assert r.stdout.splitlines() == ["map raised ForkHazardError", "apply_async raised ValueError",
                                     "done"], r.stderr


def test_installed_by_the_switch_with_guard(tmp_path: Path) -> None:
    env = {**os.environ, "RDMASPAWN": "patch,guard=raise"}
    r = run(tmp_path, "hook", env=env)
    assert r.stdout.splitlines() == ["map raised ForkHazardError", "apply_async raised ValueError",
                                     "done"], r.stderr


def test_without_it_the_pool_hangs(tmp_path: Path) -> None:
    """The control: a refused fork (here EAGAIN, no guard) kills CPython's own
    handler thread, and map() never returns."""
    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    script = tmp_path / "late_pool.py"
    script.write_text(_SCRIPT)
    # Its own session, so that the pool's workers go with it.
    p = subprocess.Popen([sys.executable, str(script), "plain"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                         start_new_session=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            p.communicate(timeout=10)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
