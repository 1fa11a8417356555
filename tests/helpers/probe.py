"""A real child that reports what it sees, for comparing spawners.

``probe.c`` is built once per test session with the system compiler. Run it
through any spawner; :func:`normalize` turns its report into what must match
between rdmaspawn and CPython's subprocess for the same request: pids become
relations ("self", "parent"), pipe inodes become "pipe".
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

#: tests/children/, where probe.c lives.
CHILDREN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "children")


@functools.cache
def probe_path() -> str:
    """Build tests/children/probe.c (once) and return the executable's path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("the tests need a C compiler (cc) to build probe.c")
    where = tempfile.mkdtemp(prefix="rdmaspawn-probe-")
    os.chmod(where, 0o755)  # the user= tests run it as nobody
    out = os.path.join(where, "probe")
    subprocess.run(
        [cc, "-O2", "-Wall", "-o", out, os.path.join(CHILDREN, "probe.c")], check=True
    )
    return out


_ANON = re.compile(r"^(pipe|socket|anon_inode):.*")


def normalize(report: dict[str, Any], parent_pid: int | None = None,
              spawn_kwargs: dict[str, Any] = {}) -> dict[str, Any]:
    """Keep what the spawner decides; replace what differs run to run."""
    pid = report["pid"]
    parent = parent_pid if parent_pid is not None else report["ppid"]
    parent_pgid = os.getpgid(parent) if _alive(parent) else None
    parent_sid = os.getsid(parent) if _alive(parent) else None

    def relation(value: int, of_parent: int | None) -> Any:
        if value == pid:
            return "self"
        if value == of_parent:
            return "parent"
        return value

    out = dict(report)
    for key in ("pid", "ppid"):
        out.pop(key)
    if "cwd" not in spawn_kwargs and report["cwd"] == os.getcwd():
        out["cwd"] = "inherited"
    # CPython's posix_spawn path builds envp from os.environ, its fork_exec
    # path hands over the C environ: not the same order, and not the same
    # entries where a library called setenv() behind Python's back (pytest's
    # run has COLUMNS so). Compare what Python knows of.
    known = {os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items()}
    env = {e.encode("utf-8", "surrogateescape") for e in report["env"]}
    if "env" not in spawn_kwargs and known <= env:
        out["env"] = "inherited"
    else:
        out["env"] = sorted(report["env"])
    out["pgid"] = relation(report["pgid"], parent_pgid)
    out["sid"] = relation(report["sid"], parent_sid)
    out["fds"] = {
        fd: {"target": _ANON.sub(r"\1", info["target"]), "cloexec": info["cloexec"]}
        for fd, info in report["fds"].items()
    }
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def run_probe(popen: Any, args: tuple = (), **kwargs: Any) -> dict[str, Any]:
    """Run the probe with ``popen`` (a Popen class) and return its normalized report."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    with popen([probe_path(), *args], **kwargs) as proc:
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, (popen, kwargs, proc.returncode)
    return normalize(json.loads(out), os.getpid(), kwargs)


#: Fixed fd for pass_fds in the combination tests, the same in every process.
PASS_FD = 40

#: Every declarative argument of the combination tests, for this Python and user.
FLAGS = ["cwd", "env", "start_new_session", "pass_fds", "close_fds_false",
         "umask", "no_restore_signals"]
if sys.version_info >= (3, 11):
    FLAGS.append("process_group")
if os.geteuid() == 0:
    FLAGS += ["user", "group", "extra_groups"]


def combination_kwargs(flags: list[str]) -> dict[str, Any]:
    """Popen keyword arguments for one combination of FLAGS."""
    kw: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE,
                          "stderr": subprocess.DEVNULL}
    values = {
        "cwd": ("cwd", "/tmp"),
        "env": ("env", {"RDMASPAWN_COMBO": "1", "PATH": "/usr/bin:/bin"}),
        "start_new_session": ("start_new_session", True),
        "process_group": ("process_group", 0),
        "pass_fds": ("pass_fds", (PASS_FD,)),
        "close_fds_false": ("close_fds", False),
        "user": ("user", "nobody"),
        "group": ("group", "nogroup"),
        "extra_groups": ("extra_groups", [1, 2]),
        "umask": ("umask", 0o027),
        "no_restore_signals": ("restore_signals", False),
    }
    for flag in flags:
        key, value = values[flag]
        kw[key] = value
    return kw


def all_combinations() -> list[list[str]]:
    import itertools

    return [list(c) for n in range(len(FLAGS) + 1)
            for c in itertools.combinations(FLAGS, n)]


def comparable(report: dict[str, Any], flags: list[str]) -> dict[str, Any]:
    """What must match across processes: with close_fds=False the child
    inherits whatever the parent happens to hold, so keep 0-2 and PASS_FD."""
    if "close_fds_false" in flags:
        report = dict(report)
        report["fds"] = {fd: v for fd, v in report["fds"].items()
                         if int(fd) <= 2 or int(fd) == PASS_FD}
    return report


def run_combinations(popen: Any, probe: str) -> list[dict[str, Any]]:
    """Run the probe once per combination with ``popen``; return comparable reports."""
    import warnings

    fd = os.open("/dev/null", os.O_RDONLY)
    os.dup2(fd, PASS_FD)
    os.close(fd)
    out = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # pass_fds overriding close_fds
            for flags in all_combinations():
                kw = combination_kwargs(flags)
                try:
                    with popen([probe], **kw) as proc:
                        data, _ = proc.communicate(timeout=60)
                except OSError as exc:
                    # Some combinations fail for CPython too (setpgid() after
                    # setsid() is EPERM): the failure must match then.
                    out.append({"error": [type(exc).__name__, exc.errno, exc.filename]})
                    continue
                assert proc.returncode == 0, (flags, proc.returncode)
                out.append(comparable(normalize(json.loads(data), os.getpid(), kw), flags))
    finally:
        os.close(PASS_FD)
    return out
