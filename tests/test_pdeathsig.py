"""pdeathsig: the child gets its signal when the parent *process* dies.

Three processes: the test's harness (holding the real hazard, and a child
subreaper, so that orphans come back to it to be reaped and examined), a
middle process (the parent that dies), and the grandchild that asked for the
death signal.
"""
from __future__ import annotations

import os
import textwrap

from helpers.hazard import run_with_hazard
from helpers.report import last_json

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children", "setup_probe.py")

_HARNESS = """
import ctypes, json, subprocess, time, rdmaspawn
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)    # PR_SET_CHILD_SUBREAPER

def reap(pid, timeout=60):
    # The grandchild, reparented to us once the middle process is gone.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return describe(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "still running"

def alive(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"

def middle(code):
    proc = rdmaspawn.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())
"""


def _harness(code: str) -> dict:
    run = run_with_hazard(_HARNESS + textwrap.dedent(code), "madvise", timeout=180)
    return last_json(run)


def test_parent_killed_right_after_the_spawn() -> None:
    """The middle process is SIGKILLed as soon as it has started the
    grandchild: the grandchild gets SIGTERM; without pdeathsig it lives on."""
    out = _harness("""
        out = {}
        for name, kwargs in (("pdeathsig", "pdeathsig=signal.SIGTERM"), ("control", "")):
            proc, pid = middle(
                "import json, signal, sys, time, rdmaspawn\\n"
                "p = rdmaspawn.Popen(['sleep', '30'], %s)\\n"
                "print(json.dumps(p.pid), flush=True)\\n"
                "time.sleep(30)\\n" % kwargs)
            proc.kill()
            proc.wait()
            out[name] = reap(pid, timeout=60 if name == "pdeathsig" else 0.5)
        print(json.dumps(out))
    """)
    assert out == {"pdeathsig": "signal SIGTERM", "control": "still running"}


def test_child_of_an_exiting_thread_follows_the_process() -> None:
    """Started from a ThreadPoolExecutor thread that then exits, the child
    lives on (the kernel would kill it: the death signal is tied to the
    creating thread), and still dies when the parent process does. Both
    rdmaspawn.Popen(pdeathsig=) and a preexec helper under patch()."""
    out = _harness("""
        out = {}
        for how in ("keywords", "patched"):
            proc, pid = middle(
                "import json, signal, subprocess, sys, time, rdmaspawn\\n"
                "from concurrent.futures import ThreadPoolExecutor\\n"
                "import rdmaspawn.preexec as P\\n"
                "rdmaspawn.patch()\\n"
                "def start():\\n"
                "    if %r == 'keywords':\\n"
                "        return rdmaspawn.Popen(['sleep', '30'], pdeathsig=signal.SIGTERM).pid\\n"
                "    return subprocess.Popen(['sleep', '30'],\\n"
                "                            preexec_fn=P.pdeathsig(signal.SIGTERM)).pid\\n"
                "with ThreadPoolExecutor(1) as pool:\\n"
                "    pid = pool.submit(start).result()\\n"
                "print(json.dumps(pid), flush=True)\\n"
                "time.sleep(30)\\n" % how)
            time.sleep(0.5)     # the worker thread is gone by now
            out[how + " alive after the thread"] = alive(pid)
            proc.kill()
            proc.wait()
            out[how + " after the parent"] = reap(pid)
        print(json.dumps(out))
    """)
    assert out == {
        "keywords alive after the thread": True,
        "keywords after the parent": "signal SIGTERM",
        "patched alive after the thread": True,
        "patched after the parent": "signal SIGTERM",
    }


def test_stock_cpython_loses_the_child_with_the_thread() -> None:
    """The kernel behaviour the spawner thread exists for: under stock
    CPython the same preexec_fn from an exiting worker thread gets the child
    killed while its parent lives on."""
    run = run_with_hazard("""
        import signal, subprocess, time, rdmaspawn.preexec as P
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(1) as pool:
            proc = pool.submit(lambda: subprocess.Popen(
                ["sleep", "30"], preexec_fn=P.pdeathsig(signal.SIGTERM))).result()
        try:
            print(proc.wait(timeout=60))
        except subprocess.TimeoutExpired:
            proc.kill()
            print("still running", proc.wait())
    """, None)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["-15"]


def test_parent_gone_before_prctl_takes_the_signal_at_once() -> None:
    """If the parent died between clone and the prctl, nobody will send the
    signal: the child sees getppid() is not the parent it was spawned from
    and takes it itself (simulated by naming another parent pid)."""
    run = run_with_hazard("""
        import json
        from rdmaspawn._native import engine as _engine
        from rdmaspawn._native.request import SpawnRequest
        from rdmaspawn._rdmaspawn_cffi import ffi
        from rdmaspawn._child.model import build
        from rdmaspawn._child.pack import packed
        out = []
        for parent in (1, os.getpid()):
            with packed(build(pdeathsig=signal.SIGTERM)) as setup:
                setup.parent_pid = parent
                request = SpawnRequest([b"sleep", b"0.2"], [b"/bin/sleep"])
                address = int(ffi.cast("uintptr_t", setup))
                pid, _ = _engine._capi.spawn_request(request, lambda spawn: spawn(address))
            out.append(describe(os.waitpid(pid, 0)[1]))
        print(json.dumps(out))
    """, "madvise")
    assert last_json(run) == ["signal SIGTERM", "exit 0"]


def test_spawner_thread_keeps_the_callers_signal_mask() -> None:
    """Spawned on the spawner thread, the child still gets the signal mask of
    the thread that asked for it."""
    run = run_with_hazard(f"""
        import json, subprocess, threading, rdmaspawn
        box = []
        def start():
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
            box.append(rdmaspawn.run([sys.executable, {PROBE!r}], pdeathsig=signal.SIGTERM,
                                     stdout=subprocess.PIPE).stdout)
        t = threading.Thread(target=start)
        t.start(); t.join()
        print(json.loads(box[0])["status"]["SigBlk"])
    """, "madvise")
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1], 16) == 1 << (10 - 1)  # SIGUSR1 only


def test_helper_is_a_plain_preexec_fn_under_stock_cpython() -> None:
    """rdmaspawn.preexec values are ordinary callables: stock subprocess
    (not patched, no hazard) forks and calls them."""
    run = run_with_hazard(f"""
        import json, subprocess, rdmaspawn.preexec as P
        out = subprocess.run([sys.executable, {PROBE!r}], stdout=subprocess.PIPE,
                             preexec_fn=P.pdeathsig(signal.SIGHUP)).stdout
        print(json.loads(out)["pdeathsig"])
    """, None)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(int(__import__("signal").SIGHUP))]


def test_failure_on_the_spawner_thread_reaches_the_caller() -> None:
    """A setup step that fails for a spawn run on the spawner thread raises
    in the thread that asked, and leaves no child behind."""
    run = run_with_hazard("""
        import json, resource, threading, rdmaspawn
        box = []
        def start():
            try:
                rdmaspawn.Popen(["true"], pdeathsig=signal.SIGTERM,
                                rlimits={resource.RLIMIT_NOFILE: (10**9, 10**9)})
            except rdmaspawn.ChildSetupError as exc:
                box.append([exc.step, threading.current_thread().name])
        t = threading.Thread(target=start, name="asker")
        t.start(); t.join()
        try:
            os.waitpid(-1, os.WNOHANG)
            box.append("a child is left")
        except ChildProcessError:
            box.append("no child")
        print(json.dumps(box))
    """, "madvise")
    assert last_json(run) == [["setrlimit", "asker"], "no child"]
