"""rdmaspawn.guard: fork() caught before it happens, in child interpreters with real DONTFORK memory."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from helpers.child import python_argv, run_json
from helpers.report import last_json

# `mark()` marks the middle page of an anonymous mapping MADV_DONTFORK with a
# real madvise(): the doctor's rule calls it a hazard (it borders other
# anonymous memory, tests/test_doctor_lone_page.py), yet a fork() child
# survives it (nothing touches that page), so warn mode can let forks through.
# `plant()` is the real arena hazard.
_PRELUDE = textwrap.dedent("""
    import ctypes, json, os, subprocess, sys, warnings
    import _posixsubprocess
    import rdmaspawn.tools.guard as G
    from helpers.libc import MADV_DONTFORK, PAGE, libc
    out = {}
    def mark():
        addr = libc.mmap(None, 3 * PAGE, 3, 0x22, -1, 0)
        ctypes.memset(addr, 1, 3 * PAGE)
        assert libc.madvise(addr + PAGE, PAGE, MADV_DONTFORK) == 0
        return addr + PAGE
    def attempt(name, fn):
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                value = fn()
            out[name] = {"ok": True, "value": value,
                         "warnings": [type(x.message).__name__ + ": " + str(x.message) for x in w]}
        except Exception as e:
            out[name] = {"ok": False, "error": type(e).__name__, "message": str(e),
                         "base": [c.__name__ for c in type(e).__mro__]}
    def fork_and_exit():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        return os.waitpid(pid, 0)[1]
""")


def run(code: str) -> dict[str, Any]:
    return run_json(_PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(out))\n")  # type: ignore[no-any-return]


def test_raise_mode_refuses_every_fork_path() -> None:
    """guard('raise') with DONTFORK memory: os.fork, forkpty, preexec_fn, multiprocessing 'fork' all raise ForkHazardError; no child is made."""
    out = run("""
        addr = mark()
        out["addr"] = "0x%x" % addr
        G.guard("raise")
        attempt("fork", fork_and_exit)
        attempt("forkpty", lambda: os.forkpty())
        attempt("preexec", lambda: subprocess.run(["true"], preexec_fn=lambda: None).returncode)
        import multiprocessing
        ctx = multiprocessing.get_context("fork")
        attempt("mp", lambda: ctx.Process(target=print).start())
        attempt("plain", lambda: subprocess.run(["true"]).returncode)
        try:
            os.waitpid(-1, os.WNOHANG)
            out["children"] = "some"
        except ChildProcessError:
            out["children"] = "none"
    """)
    for name in ("fork", "forkpty", "preexec", "mp"):
        assert out[name]["ok"] is False, (name, out[name])
        assert out[name]["error"] == "ForkHazardError"
        assert "RuntimeError" in out[name]["base"]
        assert out["addr"] in out[name]["message"]
    assert out["children"] == "none"
    if sys.version_info >= (3, 10):
        # vfork: not a fork, allowed.
        assert out["plain"] == {"ok": True, "value": 0, "warnings": []}
    else:
        # 3.9's subprocess always forks.
        assert out["plain"]["error"] == "ForkHazardError"


def test_warn_mode_warns_and_forks() -> None:
    """guard('warn'): a ForkHazardWarning naming the mapping, and the fork still happens."""
    out = run("""
        addr = mark()
        out["addr"] = "0x%x" % addr
        G.guard("warn")
        attempt("fork", fork_and_exit)
        attempt("preexec", lambda: subprocess.run(["true"], preexec_fn=lambda: None).returncode)
    """)
    for name in ("fork", "preexec"):
        assert out[name]["ok"] is True and out[name]["value"] == 0, out[name]
        assert len(out[name]["warnings"]) == 1
        assert out[name]["warnings"][0].startswith("ForkHazardWarning")
        assert out["addr"] in out[name]["warnings"][0]


def test_warn_mode_with_the_real_hazard_is_caught_in_raise_mode() -> None:
    """The real arena hazard (rdmaspawn.testing.hazard) is caught too: the would-be SIGSEGV becomes an exception."""
    out = run("""
        from rdmaspawn.testing.hazard import plant
        plant("madvise")
        G.guard("raise")
        attempt("fork", fork_and_exit)
    """)
    assert out["fork"]["error"] == "ForkHazardError"


def test_no_dontfork_memory_no_interference() -> None:
    """Without DONTFORK memory, guarded forks go ahead silently."""
    out = run("""
        G.guard("raise")
        attempt("fork", fork_and_exit)
        attempt("preexec", lambda: subprocess.run(["true"], preexec_fn=lambda: None).returncode)
    """)
    assert out["fork"] == {"ok": True, "value": 0, "warnings": []}
    assert out["preexec"] == {"ok": True, "value": 0, "warnings": []}


def test_idempotent_and_reversible() -> None:
    """guard() twice wraps once; unguard() puts the original functions back; the action can change."""
    out = run("""
        orig = (os.fork, os.forkpty, _posixsubprocess.fork_exec, getattr(subprocess, "_fork_exec", None))
        G.guard("warn"); G.guard("raise")
        out["mode"] = G.is_guarded()
        out["once"] = os.fork.__wrapped__ is orig[0] and _posixsubprocess.fork_exec.__wrapped__ is orig[2]
        G.unguard()
        now = (os.fork, os.forkpty, _posixsubprocess.fork_exec, getattr(subprocess, "_fork_exec", None))
        out["restored"] = all(a is b for a, b in zip(orig, now))
        out["after"] = G.is_guarded()
        from rdmaspawn.tools.guarded import guarded
        with guarded("raise"):
            out["inside"] = G.is_guarded()
        out["outside"] = G.is_guarded()
        @guarded("raise")
        def decorated():
            return G.is_guarded()
        G.guard("warn")
        out["decorated"] = [decorated.__name__, decorated(), G.is_guarded()]
        G.unguard()
    """)
    assert out == {"mode": "raise", "once": True, "restored": True, "after": None,
                   "inside": "raise", "outside": None,
                   "decorated": ["decorated", "raise", "warn"]}


@pytest.mark.parametrize("order", ["guard-first", "patch-first"])
def test_composes_with_patch_in_either_order(order: str) -> None:
    """patch()/guard() in either order: plain subprocess works (engine), preexec_fn and os.fork are refused, and undoing both gives CPython's behaviour back."""
    out = run(f"""
        import rdmaspawn
        order = {order!r}
        orig = (_posixsubprocess.fork_exec, getattr(subprocess, "_fork_exec", None), os.fork)
        mark()
        if order == "guard-first":
            G.guard("raise"); rdmaspawn.patch()
        else:
            rdmaspawn.patch(); G.guard("raise")
        attempt("plain", lambda: subprocess.run(["true"]).returncode)
        attempt("preexec", lambda: subprocess.run(["true"], preexec_fn=lambda: None).returncode)
        attempt("fork", fork_and_exit)
        # Undo in the same order as applied (the awkward one for wrappers).
        if order == "guard-first":
            G.unguard(); rdmaspawn.unpatch()
        else:
            rdmaspawn.unpatch(); G.unguard()
        now = (_posixsubprocess.fork_exec, getattr(subprocess, "_fork_exec", None), os.fork)
        out["restored"] = all(a is b for a, b in zip(orig, now))
        def innermost(f):
            while hasattr(f, "__wrapped__"):
                f = f.__wrapped__
            return f
        out["unwraps"] = all(innermost(a) is b for a, b in zip(now, orig))
        attempt("after", lambda: subprocess.run(["true"], preexec_fn=lambda: None).returncode)
    """)
    assert out["plain"] == {"ok": True, "value": 0, "warnings": []}, out
    assert out["preexec"]["ok"] is False, out
    # Guard on top raises first; under the engine its own PreexecFnError comes first.
    assert out["preexec"]["error"] in ("ForkHazardError", "PreexecFnError"), out
    assert out["fork"]["error"] == "ForkHazardError"
    # Undone: CPython's own behaviour again (the marked page is harmless to the child).
    assert out["after"] == {"ok": True, "value": 0, "warnings": []}, out
    assert out["unwraps"] is True, out
    if order == "patch-first":
        assert out["restored"] is True, out
    # guard-first: unpatch() puts back the (inactive) guard wrapper it saved,
    # which behaves as CPython's; strict identity needs _patch._restore to
    # restore ``new.__wrapped__`` rather than the saved ``old``.


def test_foreign_wrapper_keeps_working_after_unguard() -> None:
    """A wrapper applied on top of guard's (following the __wrapped__ convention) stays in place after unguard, and guard's link leaves the chain."""
    out = run("""
        native = _posixsubprocess.fork_exec
        G.guard("raise")
        ours = _posixsubprocess.fork_exec
        def theirs(*args):
            return theirs.__wrapped__(*args)
        theirs.__wrapped__ = ours
        _posixsubprocess.fork_exec = theirs
        G.unguard()
        out["top"] = _posixsubprocess.fork_exec is theirs
        out["spliced"] = theirs.__wrapped__ is native
    """)
    assert out == {"top": True, "spliced": True}


def test_guarded_and_is_guarded_are_exported_lazily() -> None:
    """rdmaspawn.guarded/is_guarded are the tools' own, loaded on first use."""
    import rdmaspawn
    from rdmaspawn.tools import guard as G
    from rdmaspawn.tools.guarded import guarded

    assert rdmaspawn.guarded is guarded and rdmaspawn.is_guarded is G.is_guarded
    assert {"guarded", "is_guarded"} <= set(rdmaspawn.__all__)


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="CPython warns about fork() with threads from 3.12 on")
def test_cpythons_fork_warning_blames_the_caller(tmp_path: Any) -> None:
    """CPython's DeprecationWarning for fork() in a multi-threaded process
    names the line that called os.fork()/os.forkpty(), with guard() on as
    without it (it named tools/guard.py), so that a filter on the caller's
    module still applies to it."""
    script = tmp_path / "forker.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys, threading, warnings
        import rdmaspawn.tools.guard as G
        stop = threading.Event()
        threading.Thread(target=stop.wait).start()
        def fork_here(fork):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                pid = fork()                                      # FORK LINE
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
            return [(w.category.__name__, w.filename, w.lineno) for w in caught]
        out = {"stock": fork_here(os.fork)}
        G.guard(sys.argv[1])
        out["guarded fork"] = fork_here(os.fork)
        out["guarded forkpty"] = fork_here(lambda: os.forkpty()[0])  # FORKPTY LINE
        stop.set()
        print(json.dumps(out))
    """))
    lines = script.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "FORK LINE" in text)
    pty_line = next(n for n, text in enumerate(lines, 1) if "FORKPTY LINE" in text)
    for action in ("warn", "raise"):
        r = subprocess.run([sys.executable, str(script), action], capture_output=True,
                           text=True, timeout=60)
        out = last_json(r)
        expected = [["DeprecationWarning", str(script), line]]
        assert out["stock"] == expected
        assert out["guarded fork"] == expected, action
        assert out["guarded forkpty"] == [["DeprecationWarning", str(script), pty_line]]


def test_forks_without_dontfork_memory_read_no_smaps() -> None:
    """os.fork()/os.forkpty() under the guard, with nothing marked, never open
    /proc/self/smaps (the kernel's count of the child's pages clears them),
    while a marked page still costs one look per fork. Before the held fork,
    every guarded fork read smaps."""
    out = run("""
        opened = []
        sys.addaudithook(lambda event, args: event == "open" and "smaps" in str(args[0])
                         and opened.append(args[0]))
        G.guard("raise")
        for _ in range(20):
            fork_and_exit()
        pid, fd = os.forkpty()
        if pid == 0:
            os._exit(0)
        os.close(fd)
        os.waitpid(pid, 0)
        out["clean"] = len(opened)
        mark()
        G.guard("warn")
        for _ in range(3):
            attempt("marked", fork_and_exit)
        out["marked"] = len(opened) - out["clean"]
    """)
    assert out["clean"] == 0, out
    assert out["marked"] == 3, out


def test_a_refused_child_never_runs_the_program() -> None:
    """A refused os.fork()/os.forkpty() has made a child, held before it ran
    anything of the program's: it is killed there (no after-fork hook of the
    program runs in it), reaped, and a pty's fd closed; the same where a
    warning made an error refuses it."""
    out = run("""
        import tempfile, warnings
        trace = tempfile.mktemp()
        def in_child():
            with open(trace, "a") as f:
                f.write("ran\\n")
        os.register_at_fork(after_in_child=in_child)
        mark()
        from helpers.process_state import children, open_fds
        fds = open_fds()
        G.guard("raise")
        attempt("fork", os.fork)
        attempt("forkpty", os.forkpty)
        G.guard("warn")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                out["warning"] = os.fork()
            except Warning as e:
                out["warning"] = {"error": type(e).__name__}
        out["children"] = children()
        out["fds"] = open_fds() == fds
        out["ran"] = os.path.exists(trace)
    """)
    assert out["fork"]["error"] == "ForkHazardError", out
    assert out["forkpty"]["error"] == "ForkHazardError", out
    assert out["warning"]["error"] == "ForkHazardWarning", out
    assert out["children"] == [] and out["fds"] is True and out["ran"] is False, out


def test_the_warning_names_the_caller() -> None:
    """warn mode: the fork goes ahead, and its ForkHazardWarning names the
    line that called os.fork(), not the guard."""
    out = run("""
        import warnings
        mark()
        G.guard("warn")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            pid = os.fork()  # THE FORK
            if pid == 0:
                os._exit(3)
        out["status"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        import linecache
        out["where"] = [linecache.getline(x.filename, x.lineno).strip() for x in w]
    """)
    assert out["status"] == 3
    assert out["where"] == ["pid = os.fork()  # THE FORK"], out


def test_every_look_names_the_line_that_called_the_guarded_function() -> None:
    """The warning names the frame that called os.fork() or fork_exec on
    every path the guard looks on, not only the held fork's: where the C core
    cannot hold the child (it looks before the fork) and before a fork_exec
    that forks for a preexec_fn (the line of subprocess.py that calls it).
    Both named the frame above that before."""
    out = run("""
        import linecache, subprocess, warnings
        mark()
        G.guard("warn")
        def where(w):
            return [(x.filename, linecache.getline(x.filename, x.lineno).strip()) for x in w]
        G._held = None  # as where the C core cannot be loaded
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            pid = os.fork()  # THE FORK
            if pid == 0:
                os._exit(3)
        os.waitpid(pid, 0)
        out["unheld"] = where(w)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            subprocess.run(["true"], preexec_fn=lambda: None)
        out["fork_exec"] = where(w)
        out["subprocess"] = subprocess.__file__
    """)
    assert [line for _, line in out["unheld"]] == ["pid = os.fork()  # THE FORK"], out
    assert len(out["fork_exec"]) == 1, out
    filename, line = out["fork_exec"][0]
    assert filename == out["subprocess"] and "fork_exec(" in line, out


def test_a_fork_at_the_descriptor_limit_goes_ahead() -> None:
    """With no descriptor left, os.fork() under the guard forks, as it does
    unguarded: it cannot hold the child (no pipe), so it looks before the
    fork instead, as the fork_exec path does. With one descriptor left (too
    few for the pipe, enough to read smaps) that look still refuses a fork
    with DONTFORK memory in raise mode. Before, both raised EMFILE."""
    out = run("""
        import errno, resource
        from helpers.process_state import children
        G.guard("raise")
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        spent = []
        def fill(leave):
            try:
                while True:
                    spent.append(os.open("/dev/null", os.O_RDONLY))
            except OSError as e:
                assert e.errno == errno.EMFILE
            for _ in range(leave):
                os.close(spent.pop())
        fill(0)
        attempt("full", fork_and_exit)
        for fd in spent[-8:]:
            os.close(fd)
        del spent[-8:]
        mark()
        fill(1)
        attempt("marked", fork_and_exit)
        G.guard("warn")
        attempt("warned", fork_and_exit)
        for fd in spent:
            os.close(fd)
        out["children"] = children()
    """)
    assert out["full"] == {"ok": True, "value": 0, "warnings": []}, out
    assert out["marked"]["ok"] is False and out["marked"]["error"] == "ForkHazardError", out
    assert out["warned"]["ok"] is True and out["warned"]["value"] == 0, out
    assert [w.split(":")[0] for w in out["warned"]["warnings"]] == ["ForkHazardWarning"], out
    assert out["children"] == [], out


def test_a_non_forking_fork_passes_its_value_through() -> None:
    """A test double beneath the guard that forks nothing and returns None,
    'abc', -1 or a tuple of them: the guard returns that value unchanged, as
    unguarded, and leaks no descriptor. Before, each became SystemError (an
    exception set with a value returned: a debug CPython aborts)."""
    out = run("""
        from helpers.process_state import open_fds
        values = [None, "abc", -1, 2 ** 80, (None, 3), ("abc",)]
        real = os.fork
        for value in values:
            os.fork = lambda value=value: value
            out.setdefault("stock", []).append(repr(os.fork()))
        os.fork = real
        G.guard("raise")
        fds = open_fds()
        for value in values:
            os.fork.__wrapped__ = lambda value=value: value
            attempt(repr(value), lambda: repr(os.fork()))
        os.fork.__wrapped__ = real
        out["fds"] = open_fds() == fds
        attempt("real", fork_and_exit)
    """)
    for shown in out["stock"]:
        assert out[shown] == {"ok": True, "value": shown, "warnings": []}, out
    assert out["fds"] is True, out
    assert out["real"] == {"ok": True, "value": 0, "warnings": []}, out


def test_held_children_of_two_threads_exit_when_the_parent_dies(tmp_path: Any) -> None:
    """Two threads fork at once under the guard and the slow path holds both
    children (the decision blocks). SIGKILL the parent: both held children
    exit, though each was forked while the other thread's pipe was open.
    Before, each held a copy of the other's write end, and neither ever saw
    the end of file that lets it exit.

    Every wait here is bounded and whatever it started is killed: the
    children are in a session of their own, killed as a group at the end.
    (Holding them in a blocked warnings.showwarning, as a first version of
    this test did, hangs on CPython 3.14+: warnings.warn() holds the
    interpreter's warnings lock while it shows a warning, so the second
    thread never got to its warning, and the test read its pipe forever.)"""
    code = _PRELUDE + textwrap.dedent("""
        import threading
        from helpers.process_state import children
        held = threading.Semaphore(0)
        def decide(*args):  # the slow path's look, while the child is held
            held.release()
            threading.Event().wait(300)
        G._look = decide
        both = threading.Barrier(2, timeout=60)
        real = os.fork
        def fork():
            both.wait()  # both threads' pipes are open before either forks
            return real()
        mark()
        G.guard("warn")
        os.fork.__wrapped__ = fork
        for _ in range(2):
            threading.Thread(target=os.fork, daemon=True).start()
        for _ in range(2):
            held.acquire(timeout=60)
        print(json.dumps(children()), flush=True)
        threading.Event().wait(300)
    """)
    with open(tmp_path / "stderr", "w+") as err:
        p = subprocess.Popen(python_argv(code), stdout=subprocess.PIPE, stderr=err,
                             start_new_session=True)
        try:
            line = _readline(p, 90)
            kids = [int(pid) for pid in json.loads(line or "null") or []]
            p.kill()  # the parent alone, unreaped: its pid stays the group's
            assert _wait_gone([p.pid], 30) == [], "the parent outlived SIGKILL"
            assert len(kids) == 2, (line, _read(err))
            alive = _wait_gone(kids, 30)
        finally:
            try:  # whatever is left of what it started (p, unreaped, holds the group)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(30)
            if p.stdout:
                p.stdout.close()
    assert alive == [], "held children outlived their parent"


def _readline(p: subprocess.Popen[bytes], timeout: float) -> str:
    """One line of p's stdout, or what came before the timeout."""
    assert p.stdout is not None
    fd, got = p.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while not got.endswith(b"\n") and sel.select(max(0.0, deadline - time.monotonic())):
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            got += chunk
    return got.decode()


def _read(f: Any) -> str:
    f.seek(0)
    return str(f.read())


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still running (zombies are not) after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    alive = pids
    while True:
        alive = [pid for pid in alive if _running(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False

_FORK_AT_FINALIZATION = """if 1:
    import os

    class AtFinalization:
        def __del__(self):
            print("OK", flush=True)
            pid = os.fork()
            if pid != 0:
                print("parent", flush=True)
                os.waitpid(pid, 0)
            else:
                os._exit(0)

    at_finalization = AtFinalization()
"""


@pytest.mark.parametrize("value", ["guard=raise", "on"])
def test_fork_at_finalization_as_stock(value: str) -> None:
    """Issue 27 item 4, CPython's test_os.ForkTests.test_fork_at_finalization:
    a fork in a ``__del__`` at shutdown does what it does unguarded (3.9-3.11
    fork; 3.13 raises PythonFinalizationError), not an ImportError from the
    guard's first look (sys.meta_path is None by then)."""
    def run(rdmaspawn: str | None) -> tuple[int, str, list[str]]:
        env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
        if rdmaspawn is not None:
            env["RDMASPAWN"] = rdmaspawn
        r = subprocess.run([sys.executable, "-c", _FORK_AT_FINALIZATION], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        errors = [line for line in r.stderr.splitlines() if "Error" in line]
        return r.returncode, r.stdout, errors

    stock, guarded = run(None), run(value)
    assert guarded == stock
    assert "ImportError" not in str(guarded)
