"""The child's declarative setup, checked from inside real children.

Each case is read back by tests/children/setup_probe.py (run as the child) and must be
the same three ways:

- rdmaspawn.Popen's keyword argument, with the real DONTFORK hazard planted;
- the rdmaspawn.preexec helper (and the stdlib preexec_fn value rdmaspawn
  recognises) under patch(), with the hazard planted: no fork happens, since
  a forked child of that process would die before exec;
- the same preexec_fn values under stock CPython, without the hazard (CPython
  forks and calls them).

and different from a plain child's state in the same run, so that each case
can fail. (Plain children are not compared across runs: on 3.13 stock
CPython starts them with glibc's posix_spawn(), whose children start with
glibc's internal signals 32 and 33 ignored.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers.hazard import run_with_hazard
from helpers.report import last_json

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children", "setup_probe.py")

# name: (Popen keywords, preexec helper, recognised stdlib preexec_fn, what differs)
CASES = """
CASES = {
    "pdeathsig": ("dict(pdeathsig=signal.SIGTERM)", "P.pdeathsig(signal.SIGTERM)", None,
                  "pdeathsig"),
    "rlimits": ("dict(rlimits={resource.RLIMIT_NOFILE: (256, 512)})",
                "P.rlimit(resource.RLIMIT_NOFILE, 256, 512)",
                "partial(resource.setrlimit, resource.RLIMIT_NOFILE, (256, 512))", "nofile"),
    "nice": ("dict(nice=5)", "P.nice(5)", "partial(os.nice, 5)", "nice"),
    "ioprio": ("dict(ioprio=(2, 6))", "P.ioprio(2, 6)", None, "ioprio"),
    "cpu_affinity": ("dict(cpu_affinity={0})", "P.cpu_affinity([0])",
                     "partial(os.sched_setaffinity, 0, {0})", "affinity"),
    "no_new_privs": ("dict(no_new_privs=True)", "P.no_new_privs()", None, "status"),
    "ignore_signals": ("dict(ignore_signals=[signal.SIGUSR1, signal.SIGHUP])",
                       "P.ignore_signals(signal.SIGUSR1, signal.SIGHUP)",
                       "P.chain(partial(signal.signal, signal.SIGUSR1, signal.SIG_IGN),"
                       "        partial(signal.signal, signal.SIGHUP, signal.SIG_IGN))",
                       "status"),
    "default_signals": ("dict(default_signals=[signal.SIGUSR2])",
                        "P.default_signals(signal.SIGUSR2)",
                        "partial(signal.signal, signal.SIGUSR2, signal.SIG_DFL)", "status"),
    "signal_mask": ("dict(signal_mask=[signal.SIGUSR1, signal.SIGWINCH])",
                    "P.signal_mask([signal.SIGUSR1, signal.SIGWINCH])",
                    "partial(signal.pthread_sigmask, signal.SIG_SETMASK,"
                    "        [signal.SIGUSR1, signal.SIGWINCH])", "status"),
    "session": ("dict(start_new_session=True)", "P.new_session()", "os.setsid",
                "session_leader"),
    "process_group": (None, "P.process_group(0)", "os.setpgrp", "group_leader"),
    "umask": ("dict(umask=0o077)", "P.umask(0o077)", "partial(os.umask, 0o077)", "umask"),
    "several": ("dict(nice=3, rlimits={resource.RLIMIT_CORE: (0, 0)}, pdeathsig=9)",
                "P.chain(P.nice(3), P.rlimit(resource.RLIMIT_CORE, 0, 0), P.pdeathsig(9))",
                "P.chain(partial(os.nice, 3),"
                "        partial(resource.setrlimit, resource.RLIMIT_CORE, (0, 0)),"
                "        P.pdeathsig(9))", "nice"),
}
"""

_SNIPPET = CASES + """
import json, resource, subprocess
from functools import partial
import rdmaspawn
import rdmaspawn.preexec as P

PROBE = @PROBE@
MODE = @MODE@
signal.signal(signal.SIGUSR2, signal.SIG_IGN)   # for default_signals: inherited otherwise

def state(popen, **kwargs):
    out = popen([sys.executable, PROBE], stdout=subprocess.PIPE, **kwargs).communicate()[0]
    return json.loads(out)

if MODE == "patched":
    rdmaspawn.patch()
# 3.9's subprocess always forks: under the hazard a plain child comes from us.
result = {"baseline": state(rdmaspawn.Popen if MODE == "engine" else subprocess.Popen)}
for name, (kwargs, helper, stdlib, _) in CASES.items():
    if MODE == "engine":
        if kwargs is not None:
            result[name] = state(rdmaspawn.Popen, **eval(kwargs))
    else:
        result[name] = state(subprocess.Popen, preexec_fn=eval(helper))
        if stdlib is not None:
            result[name + " (stdlib)"] = state(subprocess.Popen, preexec_fn=eval(stdlib))
print(json.dumps(result))
"""


def _states(mode: str, method: str | None) -> dict:
    code = _SNIPPET.replace("@PROBE@", repr(PROBE)).replace("@MODE@", repr(mode))
    run = run_with_hazard(code, method, timeout=120)
    return last_json(run)


@pytest.fixture(scope="module")
def stock() -> dict:
    """The preexec_fn values under stock CPython, which forks: no hazard here."""
    return _states("stock", None)


def _cases() -> dict:
    namespace: dict = {}
    exec(CASES, namespace)
    return namespace["CASES"]


@pytest.mark.parametrize("method", ["madvise", "verbs"])
def test_popen_keywords_match_preexec_fn_under_cpython(stock: dict, method: str) -> None:
    """rdmaspawn.Popen(pdeathsig=, rlimits=, nice=, ...) in a process with the
    real hazard gives the child the very state the equivalent preexec_fn gives
    under stock CPython, and each differs from a plain child's."""
    engine = _states("engine", method)
    for name, (kwargs, _, _, differs) in _cases().items():
        if kwargs is None:
            continue
        assert engine[name] == stock[name], name
        assert engine[name][differs] != engine["baseline"][differs], name
        assert stock[name][differs] != stock["baseline"][differs], name


@pytest.mark.parametrize("method", ["madvise", "verbs"])
def test_preexec_values_run_without_fork_under_patch(stock: dict, method: str) -> None:
    """Under patch(), with the hazard planted (a fork child would crash),
    rdmaspawn.preexec helpers and the recognised stdlib values (os.setsid,
    partial(os.nice, n), ...) are carried out in the CLONE_VM child, giving
    exactly the state stock CPython's forked child gets from the same value."""
    patched = _states("patched", method)
    assert set(patched) == set(stock)
    for name, (_, _, stdlib, differs) in _cases().items():
        assert patched[name] == stock[name], name
        assert patched[name][differs] != patched["baseline"][differs], name
        if stdlib is not None:
            assert patched[name + " (stdlib)"] == stock[name], name
            assert stock[name + " (stdlib)"] == stock[name], name


def test_unrecognised_preexec_fn_still_refused_with_hazard() -> None:
    """A preexec_fn with no declarative equivalent (a lambda, or a chain
    holding one) is still refused under the hazard; the message is a short
    first line, then one replacement per line."""
    run = run_with_hazard("""
        import json, subprocess, rdmaspawn, rdmaspawn.preexec as P
        rdmaspawn.patch()
        for fn in (lambda: None, P.chain(P.nice(1), lambda: None)):
            try:
                subprocess.run(["true"], preexec_fn=fn)
            except rdmaspawn.PreexecFnError as exc:
                print(json.dumps(str(exc)))
    """, "madvise")
    assert run.returncode == 0, run.stderr
    messages = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(messages) == 2
    lines = messages[0].splitlines()
    assert len(lines[0]) < 100 and "MADV_DONTFORK" in lines[0]
    replacements = [line for line in lines if "->" in line]
    assert len(replacements) >= 10
    assert all(len(line) < 110 for line in lines)
    assert any("rdmaspawn.preexec.pdeathsig(sig)" in line for line in replacements)


def test_setup_failure_is_an_oserror_naming_the_step() -> None:
    """A step that fails (setrlimit above the kernel's ceiling: EPERM) raises
    ChildSetupError: an OSError with the errno and the step, and a
    SubprocessError as CPython's failed preexec_fn is; no fd and no child
    are left behind."""
    run = run_with_hazard("""
        import errno, json, resource, subprocess, rdmaspawn, rdmaspawn.preexec as P
        before = sorted(os.listdir("/proc/self/fd"))
        limits = {resource.RLIMIT_NOFILE: (10**9, 10**9)}
        out = {}
        for how in ("keywords", "patched"):
            try:
                if how == "keywords":
                    rdmaspawn.Popen(["true"], rlimits=limits, stdout=subprocess.PIPE)
                else:
                    with rdmaspawn.patched():
                        subprocess.Popen(["true"], stdout=subprocess.PIPE,
                                         preexec_fn=P.rlimit(resource.RLIMIT_NOFILE,
                                                             10**9, 10**9))
            except rdmaspawn.ChildSetupError as exc:
                out[how] = [exc.errno, exc.step, isinstance(exc, subprocess.SubprocessError),
                            str(exc)]
        try:
            os.waitpid(-1, os.WNOHANG)
            out["children"] = "some"
        except ChildProcessError:
            out["children"] = "none"
        out["fds"] = sorted(os.listdir("/proc/self/fd")) == before
        print(json.dumps(out))
    """, "madvise")
    out = last_json(run)
    import errno
    for how in ("keywords", "patched"):
        err, step, is_subprocess_error, text = out[how]
        assert (err, step, is_subprocess_error) == (errno.EPERM, "setrlimit", True)
        assert "setrlimit" in text
    assert out["children"] == "none" and out["fds"] is True


def test_bad_values_fail_in_the_parent() -> None:
    """Wrong types and ranges are refused before any child exists."""
    import rdmaspawn

    for kwargs in ({"nice": "5"}, {"pdeathsig": 0}, {"cpu_affinity": []},
                   {"rlimits": {0: (-2, 5)}}, {"ignore_signals": [99]}):
        with pytest.raises((TypeError, ValueError)):
            rdmaspawn.Popen(["true"], **kwargs)


def test_setup_runs_in_order_for_privileges() -> None:
    """Priorities are set before the ids drop (a lower nice value needs
    CAP_SYS_NICE), and the death signal after (the kernel clears it on a
    credential change): with user=nobody both still hold in the child.
    (CPython runs preexec_fn after the ids change, where the nice would fail.)"""
    if os.geteuid() != 0:
        pytest.skip("needs root to change user")
    # nobody cannot run this venv's interpreter (under /root); the system's will do.
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is missing")
    code = textwrap.dedent(f"""
        import json, signal, subprocess, sys, rdmaspawn
        out = rdmaspawn.run([{python!r}, "-I", {PROBE!r}], user=65534, group=65534,
                            extra_groups=[], pdeathsig=signal.SIGTERM, nice=-5,
                            stdout=subprocess.PIPE, cwd="/").stdout
        state = json.loads(out)
        print(json.dumps([state["pdeathsig"], state["nice"]]))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    pdeathsig, nice = json.loads(res.stdout)
    assert pdeathsig == 15
    assert nice == os.getpriority(os.PRIO_PROCESS, 0) - 5


def test_guard_lets_recognised_values_through() -> None:
    """With guard("raise") and patch() in either order, a recognised
    preexec_fn runs (no fork happens) while an arbitrary one is still stopped."""
    run = run_with_hazard("""
        import json, subprocess, rdmaspawn, rdmaspawn.preexec as P
        out = {}
        for order in ("guard-first", "patch-first"):
            if order == "guard-first":
                rdmaspawn.guard("raise"); rdmaspawn.patch()
            else:
                rdmaspawn.patch(); rdmaspawn.guard("raise")
            rc = subprocess.run(["true"], preexec_fn=P.chain(P.nice(1), os.setsid)).returncode
            try:
                subprocess.run(["true"], preexec_fn=lambda: None)
                refused = None
            except (rdmaspawn.ForkHazardError, rdmaspawn.PreexecFnError) as exc:
                refused = type(exc).__name__
            rdmaspawn.unguard(); rdmaspawn.unpatch()
            out[order] = [rc, refused is not None]
        print(json.dumps(out))
    """, "madvise")
    assert last_json(run) == {"guard-first": [0, True],
                                                       "patch-first": [0, True]}


def test_launchers_own_preexec_fn_is_refused_by_the_engine() -> None:
    """A launcher's own closure (Ray starts gcs_server with one that blocks
    SIGINT and sets a death signal), under patch() with the guard on in
    either order and in either action, and under patch() alone: the engine's
    refusal, PreexecFnError (a SubprocessError), naming the callable as
    module.qualname and listing the replacements (pthread_sigmask ->
    preexec.signal_mask among them), and not advising the patch() in force."""
    run = run_with_hazard("""
        import json, subprocess, rdmaspawn
        def start_gcs_server():
            def preexec_fn():
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            return subprocess.Popen(["true"], preexec_fn=preexec_fn)
        out = {}
        for order in ("patch-only", "guard-first", "patch-first", "patch-first-warn"):
            if order == "guard-first":
                rdmaspawn.guard("raise"); rdmaspawn.patch()
            elif order == "patch-only":
                rdmaspawn.patch()
            else:
                rdmaspawn.patch(); rdmaspawn.guard(order.endswith("warn") and "warn" or "raise")
            try:
                start_gcs_server().wait()
                out[order] = None
            except Exception as exc:
                out[order] = [type(exc).__name__, isinstance(exc, subprocess.SubprocessError),
                              str(exc)]
            rdmaspawn.unguard(); rdmaspawn.unpatch()
        print(json.dumps(out))
    """, "madvise")
    out = last_json(run)
    for order, result in out.items():
        assert result is not None, order
        name, is_subprocess_error, message = result
        assert (name, is_subprocess_error) == ("PreexecFnError", True), (order, message)
        assert "__main__.start_gcs_server.<locals>.preexec_fn" in message, message
        assert "signal.pthread_sigmask" in message, message
        assert "rdmaspawn.preexec.signal_mask(" in message, message
        assert "rdmaspawn.patch()" not in message, message


def test_guard_does_not_advise_the_patch_in_force() -> None:
    """The guard's refusal of os.fork() advises rdmaspawn.patch() only where
    patch() is not in force already."""
    run = run_with_hazard("""
        import json, rdmaspawn
        out = {}
        rdmaspawn.guard("raise")
        for state in ("unpatched", "patched"):
            if state == "patched":
                rdmaspawn.patch()
            try:
                os.fork()
            except rdmaspawn.ForkHazardError as exc:
                out[state] = str(exc)
        print(json.dumps(out))
    """, "madvise")
    out = last_json(run)
    assert "rdmaspawn.patch()" in out["unpatched"]
    assert "rdmaspawn.patch()" not in out["patched"]
    assert "rdmaspawn.Popen" in out["patched"]


PREEXEC_AFTER_IDS = {
    "partial(os.nice, -5)": "functools.partial(os.nice, -5)",
    "preexec.nice(-5)": "P.nice(-5)",
    "chain(os.setsid, nice(-5))": "P.chain(os.setsid, P.nice(-5))",
}


@pytest.mark.parametrize("how", ["rdmaspawn.Popen", "patch()"])
def test_preexec_fn_runs_after_the_id_change_as_in_cpython(how: str) -> None:
    """A recognised preexec_fn with user=nobody is refused where CPython
    refuses it: CPython calls preexec_fn after the id change, and nobody may
    not lower its nice value. (The engine ran it before
    the change: a nobody child at nice -5.) The keywords keep their
    privilege-first order, also next to a recognised preexec_fn."""
    if os.geteuid() != 0:
        pytest.skip("needs root to change user")
    code = textwrap.dedent(f"""
        import functools, json, os, resource, subprocess, rdmaspawn
        import rdmaspawn.preexec as P
        values = {PREEXEC_AFTER_IDS!r}
        popen = rdmaspawn.Popen if {how!r} == "rdmaspawn.Popen" else subprocess.Popen
        def outcome(popen, **kwargs):
            try:
                return popen(["/bin/true"], user=65534, group=65534, extra_groups=[],
                             cwd="/", **kwargs).wait()
            except Exception as exc:
                return [type(exc).__name__, isinstance(exc, subprocess.SubprocessError)]
        out = {{"stock": {{name: outcome(subprocess.Popen, preexec_fn=eval(value))
                           for name, value in values.items()}}}}
        if {how!r} == "patch()":
            rdmaspawn.patch()
        out["ours"] = {{name: outcome(popen, preexec_fn=eval(value))
                        for name, value in values.items()}}
        out["keywords"] = [outcome(rdmaspawn.Popen, nice=-5),
                           outcome(rdmaspawn.Popen, nice=-5, preexec_fn=os.setsid)]
        print(json.dumps(out))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert all(result == ["SubprocessError", True] for result in out["stock"].values()), out
    for name, result in out["ours"].items():
        assert result in (["ChildSetupError", True], ["SubprocessError", True]), (name, out)
    assert out["keywords"] == [0, 0]


#: preexec_fn values that set the session or the group, against the keywords
#: that did it first in CPython's child (setsid, then setpgid, then preexec_fn).
SESSION_VALUES = {
    "os.setsid": "os.setsid",
    "os.setpgrp": "os.setpgrp",
    "partial(os.setpgid, 0, 0)": "functools.partial(os.setpgid, 0, 0)",
    "preexec.new_session()": "P.new_session()",
}


@pytest.mark.parametrize("how", ["rdmaspawn.Popen", "patch()"])
def test_session_and_group_values_fail_where_cpython_fails(how: str) -> None:
    """os.setsid as preexec_fn is refused where the child leads a session or
    a group already (start_new_session=True, process_group=0), and a group
    set by process_group= comes before it, as in CPython's child; the
    engine's child gave a new session silently, and refused process_group
    with os.setsid where CPython allows it. Every outcome is the stock one,
    and the engine carried out every spawn (no fork)."""
    code = textwrap.dedent(f"""
        import functools, itertools, json, os, subprocess, sys, rdmaspawn
        import rdmaspawn.preexec as P
        from rdmaspawn._native import engine
        values = {SESSION_VALUES!r}
        groups = [None, 0, os.getpgrp()] if sys.version_info >= (3, 11) else [None]
        probe = [sys.executable, "-c",
                 "import os; print(os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid())"]
        def outcome(popen, value, new_session, group):
            kwargs = {{"preexec_fn": eval(value), "start_new_session": new_session}}
            if group is not None:
                kwargs["process_group"] = group
            try:
                with popen(probe, stdout=subprocess.PIPE, text=True, **kwargs) as proc:
                    return proc.communicate()[0].split()
            except Exception as exc:
                if isinstance(exc, subprocess.SubprocessError):  # ChildSetupError is one
                    return ["SubprocessError", None]
                return [type(exc).__name__, getattr(exc, "errno", None)]
        cases = list(itertools.product(values, [False, True], groups))
        stock = [outcome(subprocess.Popen, values[v], s, g) for v, s, g in cases]
        if {how!r} == "patch()":
            rdmaspawn.patch()
        popen = rdmaspawn.Popen if {how!r} == "rdmaspawn.Popen" else subprocess.Popen
        before = engine.spawn_count()
        ours = [outcome(popen, values[v], s, g) for v, s, g in cases]
        print(json.dumps({{"cases": cases, "stock": stock, "ours": ours,
                           "spawns": engine.spawn_count() - before}}))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    differ = [(case, s, o) for case, s, o in zip(out["cases"], out["stock"], out["ours"])
              if s != o]
    assert differ == [], differ
    # os.setsid after start_new_session=True fails there: the test can fail
    assert ["SubprocessError", None] in out["stock"] and ["True", "True"] in out["stock"]
    assert out["spawns"] == len(out["cases"])


BAD_ARGUMENTS = {"cwd": 1.5, "umask": "x", "env": {"A": "b\0"}}


@pytest.mark.parametrize("keyword", sorted(BAD_ARGUMENTS))
@pytest.mark.parametrize("through", ["Popen", "patch"])
def test_a_bad_argument_is_raised_before_the_setup_is_packed(keyword: str, through: str) -> None:
    """CPython converts fork_exec's arguments before its preexec_fn runs in the
    child: a bad argument beside a setup that cannot be packed (no such
    cgroup) raises the argument's error, as stock's does beside a preexec_fn."""
    import rdmaspawn
    from rdmaspawn.preexec import cgroup

    kwargs = {keyword: BAD_ARGUMENTS[keyword]}
    with pytest.raises(BaseException) as stock:
        subprocess.Popen(["true"], preexec_fn=os.getpid, **kwargs)
    with pytest.raises(BaseException) as ours:
        if through == "Popen":
            rdmaspawn.Popen(["true"], cgroup="/nonexistent/cg", **kwargs)
        else:
            with rdmaspawn.patched():
                subprocess.Popen(["true"], preexec_fn=cgroup("/nonexistent/cg"), **kwargs)
    assert (type(ours.value), str(ours.value)) == (type(stock.value), str(stock.value))
