"""multiprocessing without fork: the default start method and rdmaspawn.get_context().

Each case runs in a fresh interpreter (the default context is per process and
is fixed by its first use). The hazard cases plant the real DONTFORK hazard
and bound every pool with timeouts: a hang fails the test instead of
stalling it.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers.hazard import run_with_hazard
from helpers.report import last_json

from rdmaspawn.dropin import cpython as _cpython

#: CPython's own default start method: fork, forkserver from 3.14.
MP_DEFAULT = _cpython.require().mp_default


def fresh(code: str) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, check=False)
    return dict(last_json(r))


def test_default_method_is_the_one_multiprocessing_would_use() -> None:
    """default_method() (the doctor's "default" line) names the context a
    program that chose none gets: CPython's own, then the one preferred."""
    out = fresh("""
        import json, multiprocessing as mp
        from rdmaspawn.dropin.startmethod import default_method, prefer_start_method
        out = {"own": default_method()}
        prefer_start_method("spawn")
        out["preferred"] = default_method()
        out["used"] = mp.get_start_method()
        print(json.dumps(out))
    """)
    stock = fresh("""
        import json, multiprocessing as mp
        print(json.dumps({"used": mp.get_start_method()}))
    """)
    assert out == {"own": stock["used"], "preferred": "spawn", "used": "spawn"}


def test_preferred_default_leaves_the_program_free_to_choose() -> None:
    """Only the default changes: set_start_method() still works, get_context('fork') forks."""
    out = fresh("""
        import json, multiprocessing as mp
        from rdmaspawn.dropin.startmethod import prefer_start_method
        out = {"before": mp.get_start_method(allow_none=True), "did": prefer_start_method() is not None}
        out["default"] = mp.get_context().get_start_method()
        mp.set_start_method("fork", force=True)   # what a program that wants fork does
        out["chosen"] = mp.get_start_method()
        mp.set_start_method(None, force=True)
        mp.set_start_method("spawn")              # no "context has already been set"
        out["chosen_again"] = mp.get_start_method()
        out["explicit_fork"] = mp.get_context("fork").get_start_method()
        print(json.dumps(out))
    """)
    assert out == {"before": None, "did": True, "default": "forkserver", "chosen": "fork",
                   "chosen_again": "spawn", "explicit_fork": "fork"}


def test_a_default_already_in_use_is_left_alone() -> None:
    out = fresh("""
        import json, multiprocessing as mp
        from rdmaspawn.dropin.startmethod import prefer_start_method
        used = mp.get_start_method()
        print(json.dumps({"used": used, "did": prefer_start_method("spawn") is not None,
                          "now": mp.get_start_method()}))
    """)
    assert out == {"used": MP_DEFAULT, "did": False, "now": MP_DEFAULT}


def test_patch_start_method_and_unpatch() -> None:
    out = fresh("""
        import json, multiprocessing as mp, rdmaspawn
        from multiprocessing import context
        rdmaspawn.patch(start_method="spawn")
        out = {"patched": rdmaspawn.is_patched(),
               "default": context._default_context._default_context.get_start_method()}
        rdmaspawn.unpatch()
        out["after_unpatch"] = mp.get_start_method()
        try:
            rdmaspawn.patch(start_method="fork")
        except ValueError as exc:
            out["fork"] = str(exc)
        print(json.dumps(out))
    """)
    assert out["patched"] is True and out["default"] == "spawn"
    assert out["after_unpatch"] == MP_DEFAULT
    assert "not 'fork'" in str(out["fork"])


def fresh_under(value: str, code: str) -> dict[str, object]:
    import os

    env = {**os.environ, "RDMASPAWN": value}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, check=False, env=env)
    return dict(last_json(r))


def test_each_switch_undoes_only_the_start_method_it_set() -> None:
    """Under RDMASPAWN=start_method=forkserver the default is forkserver;
    leaving ``with patched():`` (which set no start method), an unpatch() of a
    never-patched process, and unpatch() after patch(start_method="spawn")
    each leave it forkserver (they reset it to fork)."""
    code = """
        import json, multiprocessing as mp, rdmaspawn
        from multiprocessing import context
        def default():
            return context._default_context._default_context.get_start_method()
        out = {"start": default()}
        with rdmaspawn.patched():
            pass
        out["after_patched"] = default()
        rdmaspawn.unpatch()
        out["after_lone_unpatch"] = default()
        rdmaspawn.patch(start_method="spawn")
        out["patched_spawn"] = default()
        rdmaspawn.unpatch()
        out["after_unpatch"] = default()
        print(json.dumps(out))
    """
    assert fresh_under("start_method=forkserver", code) == {
        "start": "forkserver", "after_patched": "forkserver",
        "after_lone_unpatch": "forkserver", "patched_spawn": "spawn",
        "after_unpatch": "forkserver"}


def test_get_context() -> None:
    out = fresh("""
        import json, rdmaspawn
        out = {"forkserver": rdmaspawn.get_context().get_start_method(),
               "spawn": rdmaspawn.get_context("spawn").get_start_method(),
               "patched": rdmaspawn.is_patched()}
        try:
            rdmaspawn.get_context("fork")
        except ValueError:
            out["fork"] = "ValueError"
        print(json.dumps(out))
    """)
    assert out == {"forkserver": "forkserver", "spawn": "spawn", "patched": True,
                   "fork": "ValueError"}


# Pools with the hazard planted; TIMEOUT bounds every wait.
_POOLS = """
import concurrent.futures, multiprocessing, subprocess, time
TIMEOUT = 30
def square(x):
    return x * x
def attempt(name, fn):
    try:
        print(name, "ok" if fn() == [x * x for x in range(6)] else "wrong")
    except (multiprocessing.TimeoutError, concurrent.futures.TimeoutError):
        print(name, "timeout")
    except Exception as exc:
        print(name, "raised", type(exc).__name__)
def pool(ctx=None):
    with (ctx or multiprocessing).Pool(2) as p:
        r = p.map_async(square, range(6))
        end = time.monotonic() + TIMEOUT
        # A fork Pool replaces a dead worker with another fork that dies, for
        # ever: a hang that burns a CPU until TIMEOUT.  The first worker found
        # dead of a signal ends the wait (fork's only: another start method's
        # exitcode reads a pipe that the Pool's thread reads too).
        while p._ctx.get_start_method() == "fork" and not r.ready():
            if any(w.exitcode is not None and w.exitcode < 0 for w in list(p._pool)):
                raise ChildProcessError("a Pool worker died")
            if time.monotonic() > end:
                break
            r.wait(0.05)
        return r.get(max(0.0, end - time.monotonic()))
def ppe(ctx=None):
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as ex:
        return list(ex.map(square, range(6), timeout=TIMEOUT))
if __name__ == "__main__":
"""


def test_get_context_pools_run_under_the_hazard_even_without_vfork() -> None:
    """Pool(context=) and ProcessPoolExecutor(mp_context=) with get_context(): all finish.

    subprocess._USE_VFORK = False makes CPython's own fork_exec fork on
    3.10-3.13, as 3.9's always does: the forkserver and the resource tracker
    must come from the engine (get_context() patches). 3.14+ ignores the flag
    (and vforks): there the test shows the pools finish, no more.
    """
    r = run_with_hazard(_POOLS + textwrap.indent(textwrap.dedent("""
        import rdmaspawn
        subprocess._USE_VFORK = False
        for method in ("forkserver", "spawn"):
            ctx = rdmaspawn.get_context(method)
            attempt("pool-" + method, lambda: pool(ctx))
            attempt("ppe-" + method, lambda: ppe(ctx))
    """), "    "), "auto", timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == [
        "pool-forkserver ok", "ppe-forkserver ok", "pool-spawn ok", "ppe-spawn ok"]


@pytest.mark.parametrize("kind", ["pool", "ppe"])
def test_default_fork_with_guard_raise_is_an_error_not_a_hang(kind: str) -> None:
    """The default kept as fork, guard('raise'): ForkHazardError at once; the control hangs or dies.

    3.14+'s default is forkserver: there the program chooses fork, as 3.9-3.13 default to it.
    """
    fork = "    multiprocessing.set_start_method('fork')\n" if MP_DEFAULT != "fork" else ""
    guarded = run_with_hazard(_POOLS + fork + textwrap.indent(textwrap.dedent(f"""
        import rdmaspawn
        rdmaspawn.guard("raise")
        attempt({kind!r}, {kind})
    """), "    "), "auto", timeout=120)
    assert guarded.returncode == 0, guarded.stderr
    assert guarded.stdout == f"{kind} raised ForkHazardError\n", guarded.stderr
    # The control's pool waits out its TIMEOUT: 10 s, not 30, are plenty for
    # six squares, and every CI lane pays the wait.
    control = run_with_hazard(_POOLS.replace("TIMEOUT = 30", "TIMEOUT = 10") + fork
                              + f"    attempt({kind!r}, {kind})\n", "auto", timeout=120)
    assert control.stdout.split()[1:] != ["ok"], control.stdout
