"""KeyboardInterrupt inside rdmaspawn.Popen(): the interrupt is raised, and
nothing leaks: the child is reaped (killed first if it runs), its pipes closed.

Each test runs in a child interpreter: they install signal handlers and
send SIGINT storms.
"""
from __future__ import annotations

import subprocess
import textwrap

from helpers.child import last_json, python_argv


def _run(code: str, timeout: int = 120) -> dict:
    res = subprocess.run(python_argv(textwrap.dedent(code)),
                         capture_output=True, text=True, timeout=timeout)
    return last_json(res)  # type: ignore[no-any-return]


def test_sigint_storm_leaks_no_child_and_no_fd():
    """SIGINTs at random moments of a loop of Popen(stdin/stdout/stderr=PIPE):
    every interrupt reaches the caller, and afterwards (the Popens the caller
    got waited for, abandoned ones collected) no child and no fd is left.
    Before rdmaspawn held SIGINT back, ~90% of the interrupts left a zombie."""
    out = _run("""
        import gc, json, random, signal, subprocess, threading, time
        import rdmaspawn
        from helpers.process_state import children, open_fds

        main = threading.main_thread().ident
        go, stop = threading.Event(), threading.Event()
        rng = random.Random(1)

        def storm():
            go.wait()
            while not stop.is_set():
                time.sleep(rng.uniform(0, 0.002))
                signal.pthread_kill(main, signal.SIGINT)

        fds, kids = open_fds(), children()
        procs, interrupts = [], 0
        t = threading.Thread(target=storm)
        t.start()
        go.set()
        for _ in range(400):
            try:
                try:
                    procs.append(rdmaspawn.Popen(["/bin/true"], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE))
                except KeyboardInterrupt:
                    interrupts += 1
            except KeyboardInterrupt:
                interrupts += 1
        while True:  # stop the storm; absorb its last interrupts
            try:
                stop.set()
                t.join()
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                break
            except KeyboardInterrupt:
                pass
        for p in procs:
            p.communicate()
        procs.clear()
        gc.collect()          # Popens lost by the loop itself go to subprocess._active
        time.sleep(0.3)
        subprocess._cleanup()
        print(json.dumps({"interrupts": interrupts,
                          "children": sorted(set(children()) - set(kids)),
                          "fds": sorted(open_fds() - fds)}))
    """)
    assert out["interrupts"] > 20, out  # the storm did land
    assert out["children"] == [] and out["fds"] == [], out


def test_interrupt_during_popen_is_raised_and_the_child_reaped():
    """A SIGINT that arrives while Popen() runs (here: from the env mapping
    it reads) is raised when Popen() would return; the caller never gets the
    Popen, so its running child is killed and reaped and its pipes closed."""
    out = _run("""
        import json, signal, subprocess
        import rdmaspawn
        from helpers.process_state import children, open_fds

        class Env(dict):
            def items(self):
                signal.raise_signal(signal.SIGINT)
                return super().items()

        fds, kids = open_fds(), children()
        try:
            rdmaspawn.Popen(["/bin/sleep", "30"], env=Env(PATH="/bin"), stdout=subprocess.PIPE)
            raised = False
        except KeyboardInterrupt:
            raised = True
        print(json.dumps({"raised": raised, "children": children() == kids,
                          "fds": open_fds() == fds,
                          "handler": signal.getsignal(signal.SIGINT) is signal.default_int_handler}))
    """)
    assert out == {"raised": True, "children": True, "fds": True, "handler": True}


def test_a_handler_that_does_not_raise_runs_once_and_popen_succeeds():
    """A SIGINT handler of the program's own that only records runs once, after
    the child has started; Popen() returns normally and the child is the caller's."""
    out = _run("""
        import json, signal, subprocess
        import rdmaspawn

        seen = []
        signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))

        class Env(dict):
            def items(self):
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)
                return super().items()

        p = rdmaspawn.Popen(["/bin/sh", "-c", "exit 3"], env=Env(PATH="/bin"))
        print(json.dumps({"status": p.wait(), "seen": seen}))
    """)
    assert out == {"status": 3, "seen": [2]}


def test_popen_outside_the_main_thread_holds_nothing():
    """In another thread no handler can run, so nothing is swapped."""
    out = _run("""
        import json, signal, threading
        import rdmaspawn

        seen = []
        def work():
            seen.append(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
            seen.append(rdmaspawn.Popen(["/bin/true"]).wait())
        t = threading.Thread(target=work)
        t.start(); t.join()
        print(json.dumps(seen))
    """)
    assert out == [True, 0]
