"""KeyboardInterrupt inside rdmaspawn.Popen(): the interrupt is raised, and
nothing leaks: the child is reaped (killed first if it runs), its pipes closed.

Each test runs in a child interpreter: they install signal handlers and
send SIGINT storms.
"""
from __future__ import annotations

import subprocess
import textwrap

import pytest
from helpers.child import python_argv
from helpers.report import last_json

# Each snippet starts the way a Python started from a terminal does, with
# SIGINT's default handler: a runner started in a shell's background (`cmd &`
# without job control) hands its children SIGINT ignored, and Python keeps an
# ignored SIGINT ignored, so the snippets would see no KeyboardInterrupt.
_DEFAULT_SIGINT = "import signal as _signal\n_signal.signal(_signal.SIGINT, _signal.default_int_handler)\n"


# Popen.__init__'s hold is C (csrc/python/popen_init.c); a test may
# prepend set-up code for one way of calling it.
_INITS = {"c": ""}


@pytest.fixture(params=sorted(_INITS))
def init(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def _run(code: str, init: str, timeout: int = 120) -> dict:
    res = subprocess.run(python_argv(_DEFAULT_SIGINT + _INITS[init] + textwrap.dedent(code)),
                         capture_output=True, text=True, timeout=timeout)
    return last_json(res)  # type: ignore[no-any-return]


# An env mapping that calls the test's during() while Popen() reads it:
# items() where CPython builds the list itself, keys() where os.posix_spawn's
# rules read it (3.13+: the posix_spawn path). during() runs inside the hold.
_DURING = """
class Env(dict):
    def items(self):
        during()
        return super().items()
    def keys(self):
        during()
        return super().keys()
"""


def test_sigint_storm_leaks_no_child_and_no_fd(init: str) -> None:
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
        # An interrupt can also land on the loop's own back-edge: from 3.11 a
        # jump backwards runs pending handlers once it has jumped, outside the
        # handler's try (its traceback says line -1). The caller's code, not
        # Popen's: each loop sits in a try of an outer one that re-enters it.
        started = 0
        while started < 400:
            try:
                while started < 400:
                    started += 1
                    try:
                        procs.append(rdmaspawn.Popen(["/bin/true"], stdin=subprocess.PIPE,
                                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE))
                    except KeyboardInterrupt:
                        interrupts += 1
            except KeyboardInterrupt:
                interrupts += 1
        ignored = False
        while not ignored:  # absorb the storm's last interrupts, then stop it
            try:
                while not ignored:
                    try:
                        signal.signal(signal.SIGINT, signal.SIG_IGN)
                        ignored = True
                    except KeyboardInterrupt:
                        pass
            except KeyboardInterrupt:
                pass
        stop.set()
        t.join()
        for p in procs:
            p.communicate()
        procs.clear()
        gc.collect()          # Popens lost by the loop itself go to subprocess._active
        time.sleep(0.3)
        subprocess._cleanup()
        print(json.dumps({"interrupts": interrupts,
                          "children": sorted(set(children()) - set(kids)),
                          "fds": sorted(open_fds() - fds)}))
    """, init)
    assert out["interrupts"] > 20, out  # the storm did land
    assert out["children"] == [] and out["fds"] == [], out


def test_interrupt_during_popen_is_raised_and_the_child_reaped(init: str) -> None:
    """A SIGINT that arrives while Popen() runs (here: from the env mapping
    it reads: items() where CPython builds the list itself, keys() where
    os.posix_spawn's rules read it) is raised when Popen() would return; the caller never gets the
    Popen, so its running child is killed and reaped and its pipes closed."""
    out = _run(_DURING + textwrap.dedent("""
        import json, signal, subprocess
        import rdmaspawn
        from helpers.process_state import children, open_fds

        def during():
            signal.raise_signal(signal.SIGINT)

        fds, kids = open_fds(), children()
        try:
            rdmaspawn.Popen(["/bin/sleep", "30"], env=Env(PATH="/bin"), stdout=subprocess.PIPE)
            raised = False
        except KeyboardInterrupt:
            raised = True
        print(json.dumps({"raised": raised, "children": children() == kids,
                          "fds": open_fds() == fds,
                          "handler": signal.getsignal(signal.SIGINT) is signal.default_int_handler}))
    """), init)
    assert out == {"raised": True, "children": True, "fds": True, "handler": True}


def test_a_handler_that_does_not_raise_runs_once_and_popen_succeeds(init: str) -> None:
    """A SIGINT handler of the program's own that only records runs once, after
    the child has started, given the frame of the code that called Popen();
    Popen() returns normally and the child is the caller's."""
    out = _run(_DURING + textwrap.dedent("""
        import json, signal, subprocess
        import rdmaspawn

        seen = []
        signal.signal(signal.SIGINT,
                      lambda signum, frame: seen.extend((signum, frame.f_code.co_name)))

        def during():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)

        def start():
            return rdmaspawn.Popen(["/bin/sh", "-c", "exit 3"], env=Env(PATH="/bin"))

        print(json.dumps({"status": start().wait(), "seen": seen}))
    """), init)
    assert out == {"status": 3, "seen": [2, "start"]}


def test_popen_outside_the_main_thread_holds_nothing(init: str) -> None:
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
    """, init)
    assert out == [True, 0]


# glibc's struct sigaction (x86-64 and aarch64 alike): the handler, a
# 1024-bit sigset_t, then int sa_flags.
_FLAGS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def sigint_flags():
    buf = ctypes.create_string_buffer(512)
    assert libc.sigaction(2, None, buf) == 0
    return int.from_bytes(buf.raw[136:140], "little")
SA_RESTART = 0x10000000
"""


def test_the_hold_keeps_sa_restart(init: str) -> None:
    """SIGINT's SA_RESTART (``signal.siginterrupt(SIGINT, False)``) is there
    after Popen() as before it; the hold dropped it (Python's signal()
    installs without it)."""
    out = _run(_FLAGS + textwrap.dedent("""
        import json, signal
        import rdmaspawn
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        signal.siginterrupt(signal.SIGINT, False)
        before = sigint_flags()
        rdmaspawn.Popen(["/bin/true"]).wait()
        print(json.dumps({"restart_before": bool(before & SA_RESTART),
                          "same_flags": sigint_flags() == before}))
    """), init)
    assert out == {"restart_before": True, "same_flags": True}


def test_a_handler_installed_during_popen_stays(init: str) -> None:
    """A SIGINT handler the program installs while Popen() runs (here from
    the env mapping it reads; in the field from another signal's handler) is
    SIGINT's handler afterwards; the hold put back the stale one."""
    out = _run(_DURING + textwrap.dedent("""
        import json, signal
        import rdmaspawn

        def later(signum, frame):
            pass

        def during():
            signal.signal(signal.SIGINT, later)

        rdmaspawn.Popen(["/bin/true"], env=Env(PATH="/bin")).wait()
        print(json.dumps({"kept": signal.getsignal(signal.SIGINT) is later}))
    """), init)
    assert out == {"kept": True}


def test_sigint_changes_from_a_signal_handler_during_spawns_all_stay(init: str) -> None:
    """A SIGTERM handler that installs a new SIGINT handler, run at random
    moments of a spawn loop (a thread sends SIGTERM, then waits until the
    handler ran): after each, SIGINT's handler is the one it installed (34
    and 45 of 60 were lost). The count is of changes, not of time."""
    out = _run("""
        import json, os, signal, threading, time, random
        import rdmaspawn

        installed = []
        ran = threading.Event()

        def on_term(signum, frame):
            def h(s, f):
                pass
            signal.signal(signal.SIGINT, h)
            installed.append(h)
            ran.set()

        signal.signal(signal.SIGTERM, on_term)
        main = threading.main_thread().ident
        stop = threading.Event()
        lost = []
        rng = random.Random(2)

        def sender():
            while not stop.is_set() and len(installed) < 60:
                time.sleep(rng.uniform(0, 0.003))
                ran.clear()
                signal.pthread_kill(main, signal.SIGTERM)
                ran.wait()

        t = threading.Thread(target=sender)
        t.start()
        checked = 0
        while t.is_alive():
            rdmaspawn.Popen(["/bin/true"]).wait()
            n = len(installed)
            if n > checked:  # each change must still be in force now
                checked = n
                if signal.getsignal(signal.SIGINT) is not installed[-1]:
                    lost.append(n)
        stop.set()
        t.join()
        print(json.dumps({"changes": len(installed), "lost": len(lost)}))
    """, init)
    assert out["changes"] == 60 and out["lost"] == 0, out


def test_the_handler_table_is_the_programs_while_popen_runs(init: str) -> None:
    """Code that Popen() runs (here the env mapping it reads) sees SIGINT's
    handler as the program set it: the hold works on the kernel's action,
    not on Python's table (which showed a recorder of the hold's own)."""
    out = _run(_DURING + textwrap.dedent("""
        import json, signal
        import rdmaspawn

        def mine(signum, frame):
            pass

        signal.signal(signal.SIGINT, mine)
        seen = []

        def during():
            seen.append(signal.getsignal(signal.SIGINT) is mine)

        rdmaspawn.Popen(["/bin/true"], env=Env(PATH="/bin")).wait()
        print(json.dumps({"seen": seen[:1], "after": signal.getsignal(signal.SIGINT) is mine}))
    """), init)
    assert out == {"seen": [True], "after": True}


def test_siginterrupt_during_popen_stays(init: str) -> None:
    """``signal.siginterrupt(SIGINT, False)`` called while Popen() runs is in
    force afterwards (SA_RESTART set); the hold's release dropped it."""
    out = _run(_FLAGS + _DURING + textwrap.dedent("""
        import json, signal
        import rdmaspawn
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        before = sigint_flags()

        def during():
            signal.siginterrupt(signal.SIGINT, False)

        rdmaspawn.Popen(["/bin/true"], env=Env(PATH="/bin")).wait()
        print(json.dumps({"restart_before": bool(before & SA_RESTART),
                          "restart_after": bool(sigint_flags() & SA_RESTART)}))
    """), init)
    assert out == {"restart_before": False, "restart_after": True}


def test_a_process_forked_during_the_hold_gets_sigint_back(init: str) -> None:
    """A process fork()ed while Popen() holds SIGINT back (here by the env
    mapping Popen() reads; in the field by another thread) answers SIGINT
    with KeyboardInterrupt: nothing in it would ever end the hold, and it
    only counted SIGINTs, for good."""
    out = _run(_DURING + textwrap.dedent("""
        import json, os, signal, time
        import rdmaspawn

        statuses = []

        def fork_and_interrupt():
            pid = os.fork()
            if pid == 0:
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)
                    os._exit(1)    # SIGINT only counted
                except KeyboardInterrupt:
                    os._exit(0)
            statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

        def during():
            fork_and_interrupt()

        rdmaspawn.Popen(["/bin/true"], env=Env(PATH="/bin")).wait()
        print(json.dumps(statuses[:1]))
    """), init)
    assert out == [0]


# Where each __init__ first runs Python code after the hold's system call:
# an exception raised there (a SIGINT that Python recorded just before the
# swap, its handler run there) must end the hold.
_RAISE_AFTER_HOLD = {
    "c": """
        real = subprocess.Popen.__init__
        def after_hold(*args, **kwargs):
            assert capi.sigint_held()
            raise KeyboardInterrupt
        subprocess.Popen.__init__ = after_hold
    """,
}


def test_an_exception_just_after_the_hold_leaves_no_hold(init: str) -> None:
    """An exception raised between the hold's system call and the next step
    (in the field: a SIGINT that Python recorded just before the swap, its
    handler run just after) leaves SIGINT as the program set it: the next
    SIGINT raises KeyboardInterrupt."""
    out = _run("""
        import json, signal, subprocess
        import rdmaspawn
        from rdmaspawn._native import capi
        from rdmaspawn.dropin import interrupts
    """ + _RAISE_AFTER_HOLD[init] + """
        try:
            rdmaspawn.Popen(["/bin/true"])
            raised = False
        except KeyboardInterrupt:
            raised = True
        held_after = bool(capi.sigint_held())
        try:
            signal.raise_signal(signal.SIGINT)
            next_sigint = "counted"
        except KeyboardInterrupt:
            next_sigint = "KeyboardInterrupt"
        print(json.dumps({"raised": raised, "held_after": held_after,
                          "next_sigint": next_sigint}))
    """, init)
    assert out == {"raised": True, "held_after": False, "next_sigint": "KeyboardInterrupt"}


def test_a_sigint_after_the_replay_still_reaps_the_child(init: str) -> None:
    """A SIGINT that arrives after the held ones were replayed, while the
    hold ends, is raised by the release; the caller never gets that Popen, so
    its child is killed and reaped and its pipes closed all the same. Here
    the handler's first run (the replay) sends it, and its second (the
    release's) raises."""
    out = _run(_DURING + textwrap.dedent("""
        import json, signal, subprocess
        import rdmaspawn
        from helpers.process_state import children, open_fds

        runs = []
        def handler(signum, frame):
            runs.append(signum)
            if len(runs) == 1:
                signal.raise_signal(signal.SIGINT)  # counted: the hold is still on
            else:
                raise KeyboardInterrupt
        signal.signal(signal.SIGINT, handler)

        def during():
            signal.raise_signal(signal.SIGINT)

        fds, kids = open_fds(), children()
        try:
            rdmaspawn.Popen(["/bin/sleep", "30"], stdout=subprocess.PIPE, env=Env(PATH="/bin"))
            raised = False
        except KeyboardInterrupt:
            raised = True
        print(json.dumps({"raised": raised, "runs": len(runs),
                          "children": children() == kids, "fds": open_fds() == fds}))
    """), init)
    assert out == {"raised": True, "runs": 2, "children": True, "fds": True}


@pytest.mark.parametrize("raised_at", ["replay", "release"])
def test_a_child_reaped_elsewhere_before_the_discard_leaves_no_hold(
        init: str, raised_at: str) -> None:
    """The KeyboardInterrupt stays the exception, and the hold ends, where
    the child of the abandoned Popen is already gone when it is to be killed
    (reaped by someone else: os.kill() fails with ESRCH), whether the
    handler raised at the replay (the hold still on) or at the release."""
    out = _run(_DURING + textwrap.dedent("""
        import json, os, signal, subprocess
        import rdmaspawn
        from rdmaspawn._native import capi

        runs = []
        def handler(signum, frame):
            runs.append(signum)
            if len(runs) == 1 and RAISED_AT == "release":
                signal.raise_signal(signal.SIGINT)  # counted: raised at the release
            else:
                raise KeyboardInterrupt
        signal.signal(signal.SIGINT, handler)

        def during():
            signal.raise_signal(signal.SIGINT)

        real_kill, pids = os.kill, []
        def gone(pid, sig):
            pids.append(pid)
            raise ProcessLookupError(3, "No such process")
        os.kill = gone
        try:
            rdmaspawn.Popen(["/bin/sleep", "30"], env=Env(PATH="/bin"))
            raised = None
        except BaseException as e:
            raised = type(e).__name__
        os.kill = real_kill
        held_after = bool(capi.sigint_held())
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        print(json.dumps({"raised": raised, "held_after": held_after, "killed": len(pids)}))
    """).replace("RAISED_AT", repr(raised_at)), init)
    assert out == {"raised": "KeyboardInterrupt", "held_after": False, "killed": 1}


@pytest.mark.parametrize("popen", ["rdmaspawn.Popen", "subprocess.Popen"])
def test_a_sigint_while_a_forked_preexec_fn_runs_is_raised_at_once(init: str, popen: str) -> None:
    """A preexec_fn rdmaspawn does not recognise runs in a fork() child, as
    CPython runs it; a SIGINT that arrives while the parent waits for it is
    raised at once, as stock raises it, not when the preexec_fn ends (one
    that never returns could not be interrupted). rdmaspawn's caller never
    gets that Popen: its child is killed and reaped, its pipes closed;
    stock's child runs on and its Popen is reaped later, as CPython does."""
    out = _run("""
        import gc, json, os, signal, subprocess, threading, time
        import rdmaspawn
        from helpers.process_state import children, open_fds

        def slow():
            time.sleep(10)

        fds, kids = open_fds(), children()
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            POPEN(["/bin/true"], stdout=subprocess.PIPE, preexec_fn=slow)
            raised = False
        except KeyboardInterrupt:
            raised = True
        took = time.monotonic() - start
        gc.collect()
        left = [k for k in children() if k not in kids]
        for pid in left:  # stock's: still in its preexec_fn
            os.kill(int(pid), signal.SIGKILL)
            os.waitpid(int(pid), 0)
        print(json.dumps({"raised": raised, "within_2s": took < 2,
                          "children_left": len(left), "fds": open_fds() == fds}))
    """.replace("POPEN", popen), init)
    stock = popen == "subprocess.Popen"
    assert out == {"raised": True, "within_2s": True, "children_left": int(stock), "fds": True}
