"""patch(), unpatch(), patched(), is_patched(): what they replace, and that
they are idempotent, reversible and thread-safe. Each test runs in a fresh
interpreter so that the pytest process's subprocess module stays pristine.
"""
from __future__ import annotations

from helpers.child import run_json


def test_patch_routes_through_the_engine_and_unpatch_restores():
    """After patch() every stdlib spawn path reaches the engine; unpatch() puts
    back the very objects that were there."""
    out = run_json("""
        import json, os, subprocess, _posixsubprocess, rdmaspawn
        from rdmaspawn._native import engine as _engine
        before = (_posixsubprocess.fork_exec, getattr(subprocess, "_fork_exec", None),
                  subprocess.Popen._posix_spawn, os._spawnvef)
        out = {"patched_before": rdmaspawn.is_patched()}
        rdmaspawn.patch(); rdmaspawn.patch()            # idempotent
        out["patched"] = rdmaspawn.is_patched()
        def used(fn):
            n = _engine.spawn_count(); fn(); return _engine.spawn_count() - n
        out["run"] = used(lambda: subprocess.run(["/bin/true"]))
        out["run close_fds=False"] = used(lambda: subprocess.run(["/bin/true"], close_fds=False))
        out["os.popen"] = used(lambda: os.popen("true").close())
        out["os.spawnv"] = used(lambda: os.spawnv(os.P_WAIT, "/bin/true", ["true"]))
        rdmaspawn.unpatch(); rdmaspawn.unpatch()        # idempotent
        after = (_posixsubprocess.fork_exec, getattr(subprocess, "_fork_exec", None),
                 subprocess.Popen._posix_spawn, os._spawnvef)
        out["restored"] = all(a is b for a, b in zip(before, after))
        out["after"] = used(lambda: subprocess.run(["/bin/true"]))
        out["patched_after"] = rdmaspawn.is_patched()
        print(json.dumps(out))
    """)
    assert out == {
        "patched_before": False, "patched": True, "run": 1, "run close_fds=False": 1,
        "os.popen": 1, "os.spawnv": 1, "restored": True, "after": 0,
        "patched_after": False,
    }


def test_patched_context_keeps_an_outer_patch():
    """patched() undoes only what it did: an outer patch() stays in force."""
    out = run_json("""
        import json, rdmaspawn
        seen = []
        with rdmaspawn.patched():
            seen.append(rdmaspawn.is_patched())
        seen.append(rdmaspawn.is_patched())
        rdmaspawn.patch()
        with rdmaspawn.patched():
            seen.append(rdmaspawn.is_patched())
        seen.append(rdmaspawn.is_patched())
        print(json.dumps(seen))
    """)
    assert out == [True, False, True, True]


def test_patch_from_many_threads():
    """Concurrent patch()/unpatch() from many threads leave a consistent state:
    patched with the engine's primitive, or pristine with CPython's."""
    out = run_json("""
        import json, threading, subprocess, _posixsubprocess, rdmaspawn
        original = _posixsubprocess.fork_exec
        def flip(n):
            for i in range(200):
                (rdmaspawn.patch if (i + n) % 2 else rdmaspawn.unpatch)()
        ts = [threading.Thread(target=flip, args=(n,)) for n in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        state = rdmaspawn.is_patched()
        engine = getattr(_posixsubprocess.fork_exec, "__rdmaspawn__", False)
        rdmaspawn.unpatch()
        print(json.dumps([state == engine, _posixsubprocess.fork_exec is original,
                          subprocess.run(["/bin/true"]).returncode]))
    """)
    assert out == [True, True, 0]


def test_module_is_a_drop_in_for_subprocess():
    """import rdmaspawn as subprocess: the names code uses are there and work."""
    out = run_json("""
        import json, subprocess as std
        import rdmaspawn as subprocess
        names = ["Popen", "run", "call", "check_call", "check_output", "getoutput",
                 "getstatusoutput", "PIPE", "STDOUT", "DEVNULL", "CompletedProcess",
                 "SubprocessError", "CalledProcessError", "TimeoutExpired"]
        out = {"missing": [n for n in names if not hasattr(subprocess, n)]}
        out["isinstance"] = isinstance(subprocess.Popen(["/bin/true"]), std.Popen)
        out["check_output"] = subprocess.check_output(["echo", "hi"], text=True)
        out["getstatusoutput"] = list(subprocess.getstatusoutput("echo x; exit 3"))
        out["call"] = subprocess.call(["sh", "-c", "exit 4"])
        try:
            subprocess.check_call(["false"])
        except std.CalledProcessError as exc:
            out["check_call"] = exc.returncode
        try:
            subprocess.run(["sleep", "5"], timeout=0.1)
        except std.TimeoutExpired as exc:
            # What was left of the 0.1 s when CPython's communicate() called
            # wait(), as in CPython: 0.1 on a fast machine, 0.0 or less where
            # its set-up took the time (the arm64 VM under TCG).
            out["timeout"] = exc.cmd == ["sleep", "5"] and exc.timeout <= 0.1
        out["same_exceptions"] = subprocess.CalledProcessError is std.CalledProcessError
        print(json.dumps(out))
    """)
    assert out == {
        "missing": [], "isinstance": True, "check_output": "hi\n",
        "getstatusoutput": [3, "x"], "call": 4, "check_call": 1, "timeout": True,
        "same_exceptions": True,
    }


def test_a_spawn_beside_unpatch_runs_once_as_cpythons_would():
    """unpatch() (the end of ``with patched():``) in one thread while others
    are inside subprocess.Popen: every spawn starts its child once and ends
    as CPython's would, a failure before exec included (the error pipe and
    the fork_exec it serves always agree), never a NameError after the
    child ran."""
    out = run_json("""
        import collections, json, sys, threading, subprocess, rdmaspawn
        sys.setswitchinterval(1e-6)  # a switch between any two bytecodes
        seen = []  # list.append is atomic; a Counter's += is not, at this interval
        done = threading.Event()
        def spawn(n):
            for i in range(600):
                fail = (i + n) % 3 == 0
                try:
                    p = subprocess.Popen(["/bin/true"], cwd="/no-such-dir" if fail else "/")
                    seen.append("exited %d" % p.wait())
                except FileNotFoundError as exc:
                    seen.append("FileNotFoundError" if fail else repr(exc))
                except Exception as exc:
                    seen.append(repr(exc)[:120])
        def flip():
            while not done.is_set():
                with rdmaspawn.patched():
                    pass
        flipper = threading.Thread(target=flip)
        flipper.start()
        ts = [threading.Thread(target=spawn, args=(n,)) for n in range(3)]
        [t.start() for t in ts]; [t.join() for t in ts]
        done.set(); flipper.join()
        print(json.dumps(collections.Counter(seen)))
    """)
    assert out == {"exited 0": 1200, "FileNotFoundError": 600}


def test_a_wrapper_of_the_patched_method_still_spawns_after_unpatch():
    """A wrapper of Popen._execute_child put on under patch() (functools.wraps
    keeps what it wraps; the wrapper calls its own reference) still spawns
    after unpatch(): as CPython's, a failed exec raised as CPython raises it."""
    out = run_json("""
        import functools, json, subprocess, rdmaspawn
        rdmaspawn.patch()
        inner = subprocess.Popen._execute_child
        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            return inner(*args, **kwargs)
        subprocess.Popen._execute_child = wrapper
        rdmaspawn.unpatch()
        out = [subprocess.Popen(["/bin/true"], cwd="/").wait()]
        try:
            subprocess.Popen(["/bin/true"], cwd="/no-such-dir")
        except Exception as exc:
            out.append([type(exc).__name__, exc.errno, exc.filename])
        print(json.dumps(out))
    """)
    assert out == [0, ["FileNotFoundError", 2, "/no-such-dir"]]
