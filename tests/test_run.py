"""``rdmaspawn run``: a job's children survive the real hazard; the job's status and signals.

tests/children/job_script.py is a user's script: it plants the hazard and starts one
kind of child, with no rdmaspawn call of its own. Under ``rdmaspawn run``
every kind finishes; the same script alone crashes or hangs (bounded by the
script's timeouts), which proves the hazard is real for that kind.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rdmaspawn.dropin import cpython as _cpython

HERE = Path(__file__).resolve().parent
JOB = str(HERE / "children" / "job_script.py")
KINDS = ["subprocess_user", "subprocess_novfork", "spawnvp", "popen", "pool",
         "process_pool_executor", "mp_process"]
#: multiprocessing's own default: fork, forkserver from 3.14.
MP_DEFAULT = _cpython.require().mp_default
# Kinds that CPython itself starts without fork: safe even alone. popen: vfork
# on 3.10+; 3.14+ also ignores _USE_VFORK (subprocess_novfork vforks) and its
# pools start through a forkserver.
SAFE_ALONE = ({"popen"} if sys.version_info >= (3, 10) else set()) | (
    {"subprocess_novfork", "pool", "process_pool_executor", "mp_process"}
    if sys.version_info >= (3, 14) else set())

#: The console script next to this interpreter (pip installs it there).
CONSOLE = str(Path(sys.executable).with_name("rdmaspawn"))
RUN = [sys.executable, "-m", "rdmaspawn", "run"]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}


def job(prefix: list[str], kind: str, tmp: Path, *options: str) -> dict[str, str]:
    r = subprocess.run([*prefix, *options, "--", sys.executable, JOB, "auto", kind],
                       capture_output=True, text=True, timeout=180, cwd=tmp, env=clean_env())
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    return dict(json.loads(lines[0]))


@pytest.mark.parametrize("kind", KINDS)
def test_every_child_survives_under_run(kind: str, tmp_path: Path) -> None:
    out = job(RUN, kind, tmp_path)
    assert out["outcome"] == "ok", out
    if kind in ("pool", "process_pool_executor", "mp_process"):
        assert out["start_method"] == "forkserver"


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_job_alone_crashes_or_hangs(kind: str, tmp_path: Path) -> None:
    # A pool that hangs hangs for good: 10 s tell it from one that finishes in ~1 s.
    r = subprocess.run([sys.executable, JOB, "auto", kind], capture_output=True, text=True,
                       timeout=180, cwd=tmp_path, env={**clean_env(), "JOB_TIMEOUT": "10"})
    outcome = json.loads(r.stdout.splitlines()[-1])["outcome"] if r.stdout else f"rc {r.returncode}"
    if kind in SAFE_ALONE:
        assert outcome == "ok"
    else:
        assert outcome != "ok", (r.stdout, r.stderr)


@pytest.mark.parametrize("kind", ["pool", "process_pool_executor"])
def test_start_method_keep_gives_fork_hazard_error(kind: str, tmp_path: Path) -> None:
    """--start-method keep: CPython's default stays; where it is fork (3.9-3.13)
    the pool forks and guard('raise') refuses at once, no hang; 3.14+'s
    forkserver pool finishes."""
    out = job(RUN, kind, tmp_path, "--start-method", "keep")
    assert out["start_method"] == MP_DEFAULT
    if MP_DEFAULT == "fork":
        assert out["outcome"].startswith("raised ForkHazardError: os.fork() would fork()"), out
    else:
        assert out["outcome"] == "ok", out


def test_console_script_and_environment(tmp_path: Path) -> None:
    """The console script works too; run's options become the RDMASPAWN value CMD sees."""
    show = [sys.executable, "-c", "import os; print(os.environ['RDMASPAWN'])"]
    r = subprocess.run([CONSOLE, "run", "--", *show], capture_output=True, text=True,
                       timeout=60, env=clean_env(), cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "patch,guard=raise,repair,start_method=forkserver\n")
    r = subprocess.run([*RUN, "--guard", "warn", "--start-method", "spawn", "-v", *show],
                       capture_output=True, text=True, timeout=60, env=clean_env(), cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "patch,guard=warn,repair,start_method=spawn,verbose\n")
    assert r.stderr.count("rdmaspawn: RDMASPAWN=") == 1, r.stderr
    r = subprocess.run([*RUN, "--repair", "off", *show],
                       capture_output=True, text=True, timeout=60, env=clean_env(), cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "patch,guard=raise,start_method=forkserver\n")


@pytest.mark.parametrize(("command", "status"), [
    (["sh", "-c", "exit 7"], 7),
    (["sh", "-c", "kill -TERM $$"], -signal.SIGTERM),
    (["no-such-command-rdmaspawn"], 127),
    (["/etc/passwd"], 126),
    ([], 2),
])
def test_exit_status_is_the_commands(command: list[str], status: int, tmp_path: Path) -> None:
    """CMD's own status (a signal death as -N here, 128+N in a shell); 127/126 like a shell."""
    r = subprocess.run([*RUN, "--", *command], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == status, r.stderr
    if status in (126, 127, 2):
        assert r.stderr.startswith("rdmaspawn run: ") and r.stderr.count("\n") == 1, r.stderr


def test_signals_reach_the_command(tmp_path: Path) -> None:
    """run execs CMD: same pid, so a signal sent to run is CMD's to handle."""
    code = ("import os, signal, sys\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
            "print(os.getpid(), flush=True)\n"
            "signal.pause()\n")
    p = subprocess.Popen([*RUN, "--", sys.executable, "-c", code], stdout=subprocess.PIPE,
                         text=True, cwd=tmp_path)
    try:
        assert p.stdout is not None
        assert int(p.stdout.readline()) == p.pid
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 42
    finally:
        p.kill()
        p.wait()


def test_command_starts_with_a_shells_signal_dispositions(tmp_path: Path) -> None:
    """Python ignores SIGPIPE and SIGXFSZ at start-up and an exec keeps an
    ignored signal ignored: CMD must not inherit that. It starts with what
    the same command gets from subprocess (restore_signals) or a shell."""
    show = ["grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"]
    alone = subprocess.run(show, capture_output=True, text=True, timeout=60)
    under = subprocess.run([*RUN, "--", *show], capture_output=True, text=True, timeout=60,
                           cwd=tmp_path, env=clean_env())
    assert under.stdout == alone.stdout, under.stderr


def test_command_dies_of_sigpipe_and_sigxfsz_as_alone(tmp_path: Path) -> None:
    """``rdmaspawn run -- yes | head -c1`` ends yes by SIGPIPE (not exit 1,
    "Broken pipe"); writing past ``ulimit -f`` ends a program by SIGXFSZ (not
    "File too large")."""
    yes = subprocess.Popen([*RUN, "--", "yes"], stdout=subprocess.PIPE, cwd=tmp_path,
                           env=clean_env())
    assert yes.stdout is not None
    assert yes.stdout.read(1) == b"y"
    yes.stdout.close()
    assert yes.wait(timeout=60) == -signal.SIGPIPE

    import resource

    with open(tmp_path / "big", "wb") as out:
        big = subprocess.run(
            [*RUN, "--", "head", "-c", "100000", "/dev/zero"], stdout=out, cwd=tmp_path,
            env=clean_env(), timeout=60,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)))
    assert big.returncode == -signal.SIGXFSZ


def test_command_gets_the_environment_run_was_given(tmp_path: Path) -> None:
    """Python's start-up sets LC_CTYPE where the locale is C (PEP 538
    coercion); CMD gets the environment run was started with, plus RDMASPAWN."""
    env = {"PATH": os.environ["PATH"], "LANG": "C"}
    r = subprocess.run([*RUN, "--", "env"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path, env=env)
    got = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert got == {**env, "RDMASPAWN": "patch,guard=raise,repair,start_method=forkserver"}, r.stderr


def test_a_script_without_a_shebang_runs_with_sh(tmp_path: Path) -> None:
    """execve gives ENOEXEC for an executable text file with no ``#!``; a
    shell (and execvp) runs it with /bin/sh, with its arguments, found in
    PATH or by path. run does the same (it gave 126, "Exec format error")."""
    script = tmp_path / "noshebang"
    script.write_text('echo "ran as $0 with $# args: $*"\nexit 3\n')
    script.chmod(0o755)
    by_path = subprocess.run([*RUN, "--", str(script), "a", "b c"], capture_output=True,
                             text=True, timeout=60, cwd=tmp_path, env=clean_env())
    assert (by_path.returncode, by_path.stdout) == (3, f"ran as {script} with 2 args: a b c\n"), \
        by_path.stderr
    in_path = subprocess.run([*RUN, "--", "noshebang"], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path,
                             env={**clean_env(), "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert (in_path.returncode, in_path.stdout) == (3, f"ran as {script} with 0 args: \n"), \
        in_path.stderr
