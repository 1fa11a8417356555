"""RDMASPAWN's guard waits at os.fork: stand-ins that load it at the first fork.

Under ``RDMASPAWN`` with a guard (``on``, ``guard=raise``, ``guard=warn``),
start-up puts a stand-in at ``os.fork`` and ``os.forkpty`` instead of
importing ``rdmaspawn.tools.guard`` (issue 29 item 4: that import was 2.2 M
of the 8.0 M instructions ``on`` added to an interpreter's start-up on 3.11).
Pinned here, in real child interpreters with a real ``MADV_DONTFORK`` page:
the first fork is guarded as if the guard had loaded at start-up (refused,
or warned about on the caller's line, no child left); a reference taken
before it (``from os import fork``) is guarded too; what reads the guard's
state (``is_guarded()``, the doctor, its marker seen from outside) says it
is on before any fork; a fork at shutdown does what it does unguarded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import TESTS

# A real madvise(MADV_DONTFORK) on the middle page of three anonymous ones:
# the doctor's rule calls it a hazard, and a fork() child survives it (nothing
# touches that page), so warn mode can let the fork through.
_PRELUDE = textwrap.dedent(f"""\
    import ctypes, json, os, sys, warnings
    sys.path.insert(0, {str(TESTS)!r})
    from helpers.libc import MADV_DONTFORK, PAGE, libc
    out = {{"loaded_at_start": "rdmaspawn.tools.guard" in sys.modules,
           "standin_at_start": bool(getattr(os.fork, "__rdmaspawn_standin__", False))}}
    def mark():
        addr = libc.mmap(None, 3 * PAGE, 3, 0x22, -1, 0)
        ctypes.memset(addr, 1, 3 * PAGE)
        assert libc.madvise(addr + PAGE, PAGE, MADV_DONTFORK) == 0
    def children():
        try:
            os.waitpid(-1, os.WNOHANG)
            return "some"
        except ChildProcessError:
            return "none"
""")


def _run(code: str, value: str, tmp_path: Path) -> dict:
    """``code`` after the prelude, as a script (warnings read its lines), under
    ``RDMASPAWN=value``; what it printed last, as JSON."""
    script = tmp_path / "child.py"
    script.write_text(_PRELUDE + textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    env["RDMASPAWN"] = value
    r = subprocess.run([sys.executable, str(script)], env=env,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    out: dict = json.loads(r.stdout.splitlines()[-1])
    # Start-up left stand-ins, not the guard: the rest is the first fork's.
    assert (out["loaded_at_start"], out["standin_at_start"]) == (False, True), out
    return out


@pytest.mark.parametrize("value", ["guard=raise", "on"])
def test_the_first_fork_is_refused_and_so_is_a_reference_taken_before_it(
        value: str, tmp_path: Path) -> None:
    out = _run("""
        from os import fork as taken_before  # the stand-in itself
        mark()
        for name, fn in (("fork", os.fork), ("taken_before", taken_before),
                         ("forkpty", lambda: os.forkpty()[0])):
            try:
                pid = fn()
                if pid == 0:
                    os._exit(0)
                out[name] = "forked"
            except Exception as e:
                out[name] = type(e).__name__
        out["children"] = children()
        out["fork_is_guards"] = bool(getattr(os.fork, "__rdmaspawn_guard__", False))
        print(json.dumps(out))
    """, value, tmp_path)
    assert (out["fork"], out["taken_before"], out["forkpty"]) == ("ForkHazardError",) * 3, out
    assert (out["children"], out["fork_is_guards"]) == ("none", True), out


def test_a_stand_in_held_by_a_wrapper_without_wrapped_is_guarded_too(tmp_path: Path) -> None:
    """A wrapper put over os.fork before the first fork without
    ``__wrapped__`` (gevent's calls the fork it saved) holds the stand-in,
    which start-up cannot take out: os.fork, and the stand-in called through
    the wrapper's own reference, are both refused."""
    out = _run("""
        saved = os.fork
        def own_fork():  # no __wrapped__
            return saved()
        os.fork = own_fork
        mark()
        for name, fn in (("os.fork", lambda: os.fork()), ("saved", lambda: saved())):
            try:
                pid = fn()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
                out[name] = "forked"
            except Exception as e:
                out[name] = type(e).__name__
        out["children"] = children()
        print(json.dumps(out))
    """, "guard=raise", tmp_path)
    assert (out["os.fork"], out["saved"], out["children"]) == (
        "ForkHazardError", "ForkHazardError", "none"), out


def test_the_first_forks_warning_names_the_callers_line(tmp_path: Path) -> None:
    """warn mode: the first fork (through the stand-in) and one through a
    reference taken before it warn on the line that called them, as
    guard()'s own wrappers do (tests/test_guard.py)."""
    out = _run("""
        import linecache
        from os import fork as taken_before
        mark()
        def fork_here(fn):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                pid = fn()  # THE FORK
                if pid == 0:
                    os._exit(0)
            os.waitpid(pid, 0)
            return [(type(x.message).__name__, linecache.getline(x.filename, x.lineno).strip())
                    for x in w if "DONTFORK" in str(x.message)]
        out["first"] = fork_here(os.fork)
        out["taken_before"] = fork_here(taken_before)
        print(json.dumps(out))
    """, "guard=warn", tmp_path)
    expected = [["ForkHazardWarning", "pid = fn()  # THE FORK"]]
    assert out["first"] == out["taken_before"] == expected, out


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="CPython warns about fork() with threads from 3.12 on")
def test_cpythons_warning_at_the_first_fork_blames_the_caller(tmp_path: Path) -> None:
    """CPython's DeprecationWarning about fork() with threads, at the first
    fork: it names the caller's line, not the stand-in's (nothing marked)."""
    out = _run("""
        import linecache, threading
        stop = threading.Event()
        threading.Thread(target=stop.wait).start()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            pid = os.fork()  # THE FORK
            if pid == 0:
                os._exit(0)
        os.waitpid(pid, 0)
        stop.set()
        out["where"] = [(type(x.message).__name__, linecache.getline(x.filename, x.lineno).strip())
                        for x in w]
        print(json.dumps(out))
    """, "on", tmp_path)
    assert out["where"] == [["DeprecationWarning", "pid = os.fork()  # THE FORK"]], out


def test_the_guard_is_on_before_any_fork(tmp_path: Path) -> None:
    """Before any fork: is_guarded() and the in-process doctor say it is on,
    and its marker is mapped for the doctor that looks from outside."""
    out = _run("""
        with open("/proc/self/maps") as f:
            out["marker"] = [x.split()[-2] for x in f if "rdmaspawn-guard-" in x]
        import rdmaspawn
        out["is_guarded"] = rdmaspawn.is_guarded()  # first: the doctor's look settles it
        out["doctor"] = rdmaspawn.doctor().guarded
        out["children"] = children()
        print(json.dumps(out))
    """, "guard=raise", tmp_path)
    assert out["marker"] == ["/memfd:rdmaspawn-guard-raise"], out
    assert (out["doctor"], out["is_guarded"], out["children"]) == ("raise", "raise", "none"), out


def test_guard_calls_before_the_first_fork_see_rdmaspawns_mode(tmp_path: Path) -> None:
    """unguard() before any fork takes the stand-ins away for good (os.fork is
    the stock one again); guard('warn') changes the mode RDMASPAWN set."""
    out = _run("""
        import rdmaspawn
        stock = os.fork.__wrapped__  # what the stand-in stands for
        rdmaspawn.unguard()
        out["unguarded"] = [rdmaspawn.is_guarded(), os.fork is stock]
        print(json.dumps(out))
    """, "guard=raise", tmp_path)
    assert out["unguarded"] == [None, True], out
    out = _run("""
        import rdmaspawn
        rdmaspawn.guard("warn")
        out["mode"] = rdmaspawn.is_guarded()
        print(json.dumps(out))
    """, "guard=raise", tmp_path)
    assert out["mode"] == "warn", out
