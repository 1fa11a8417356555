"""Run Python code in a fresh interpreter that carries the real DONTFORK hazard.

Planting the hazard is one-way: afterwards every fork() child of that process
dies with SIGSEGV.  So the pytest process never plants it; each test hands a
snippet to :func:`run_with_hazard`, which runs it in a child interpreter after
``rdmaspawn.testing.hazard.plant(method)`` and returns the ``CompletedProcess``.

The snippet runs at module level with ``os``, ``sys``, ``signal``, ``hazard``
(the :class:`rdmaspawn.testing.hazard.Hazard`) and ``describe(status)`` in scope;
``describe`` turns a ``waitpid`` status into ``"exit N"`` or ``"signal SIGSEGV"``.
Print what the test should check, e.g.::

    result = run_with_hazard('''
        from rdmaspawn._native import engine as _engine
        pid, _ = _engine.spawn([b"true"], [b"/bin/true"])
        print(describe(os.waitpid(pid, 0)[1]))
    ''', "verbs")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["exit", "0"]

``method`` is ``"verbs"``, ``"madvise"``, ``"auto"`` or ``None`` (a control
run: same prelude, nothing planted).  A ``"verbs"`` run skips the test when
libibverbs is missing or cannot plant here (e.g. it reports fork support
"unneeded"), unless ``RDMASPAWN_REQUIRE_VERBS=1`` makes that a failure; any
other method failing to plant fails the test.

Importing: pytest's default ("prepend") import mode puts ``tests/`` on
``sys.path``, so test modules can ``from helpers.hazard import run_with_hazard``.
"""

from __future__ import annotations

import functools
import json
import mmap
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

import pytest

from . import TESTS

__all__ = [
    "DROP_CAPS",
    "HAZARD_UNAVAILABLE",
    "HazardRun",
    "Holder",
    "mappable_device",
    "require_torch",
    "require_verbs",
    "run_with_hazard",
    "shm_file",
    "torch_available",
    "verbs_answers_fork_state",
    "verbs_available",
    "verbs_file",
    "works_in_child",
]

#: Exit status of the child when plant() raised HazardError.
HAZARD_UNAVAILABLE = 77

_PRELUDE = """\
import dataclasses, json, os, signal, sys
sys.path.insert(0, {tests!r})  # the snippet may import helpers

def describe(status):
    if os.WIFSIGNALED(status):
        return "signal " + signal.Signals(os.WTERMSIG(status)).name
    if os.WIFEXITED(status):
        return "exit %d" % os.WEXITSTATUS(status)
    return "status %d" % status

hazard = None
_method = {method!r}
# Not when multiprocessing's "spawn"/"forkserver" re-imports this file as __mp_main__.
if _method is not None and __name__ == "__main__":
    from rdmaspawn.testing.hazard import HazardError, plant
    try:
        hazard = plant(_method)
    except HazardError as exc:
        sys.stderr.write("rdmaspawn-hazard: %s\\n" % exc)
        sys.exit({unavailable})
    with open({record!r}, "w") as f:
        json.dump(dataclasses.asdict(hazard), f)
del dataclasses, json, _method
# ---- snippet ----
"""


class HazardRun(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """A ``CompletedProcess`` (text output) plus the planted hazard."""

    #: The child's :class:`~rdmaspawn.testing.hazard.Hazard` as a dict; ``None`` for a control run.
    hazard: dict[str, Any] | None = None


def _require_verbs_env() -> bool:
    return os.environ.get("RDMASPAWN_REQUIRE_VERBS") == "1"


_VERBS_PROBE = "import ctypes; ctypes.CDLL('libibverbs.so.1')"
_PYVERBS_PROBE = "import pyverbs.fork"
_TORCH_PROBE = "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()"


@functools.cache
def works_in_child(code: str) -> bool:
    """Whether ``code`` runs in a fresh interpreter (so pytest itself maps nothing)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          check=False).returncode == 0


def _require(available: bool, message: str, env_var: str) -> None:
    """Skip when not ``available``; fail instead when ``env_var`` is 1 (as .ci/run sets)."""
    if available:
        return
    if os.environ.get(env_var) == "1":
        pytest.fail(f"{message} but {env_var}=1", pytrace=False)
    pytest.skip(message)


def verbs_answers_fork_state() -> bool:
    """Whether the system libibverbs has ibv_is_fork_initialized() (rdma-core 35+)."""
    return works_in_child(_VERBS_PROBE + ".ibv_is_fork_initialized")


def verbs_available() -> bool:
    """Whether libibverbs.so.1 loads (probed in a child, so pytest never maps it)."""
    return works_in_child(_VERBS_PROBE)


def require_verbs() -> None:
    """Skip (or, under RDMASPAWN_REQUIRE_VERBS=1, fail) when libibverbs is missing."""
    _require(verbs_available(), "libibverbs.so.1 is not installed (apt-get install libibverbs1)",
             "RDMASPAWN_REQUIRE_VERBS")


def pyverbs_available() -> bool:
    """Whether ``import pyverbs.fork`` works (probed in a child)."""
    return works_in_child(_PYVERBS_PROBE)


def require_pyverbs() -> None:
    """Skip (or, under RDMASPAWN_REQUIRE_PYVERBS=1, fail) when pyverbs is missing."""
    _require(pyverbs_available(), "pyverbs is not installed (see DEVELOPERS.md for the recipe)",
             "RDMASPAWN_REQUIRE_PYVERBS")


def run_with_hazard(
    code: str,
    method: str | None = "auto",
    *,
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> HazardRun:
    """Run ``code`` in a fresh interpreter after planting the hazard with ``method``.

    Returns a :class:`HazardRun`: the ``CompletedProcess`` (text stdout and
    stderr) plus ``hazard``, the planted :class:`~rdmaspawn.testing.hazard.Hazard` as
    a dict (``None`` for a control run).  The child runs in an empty temporary
    directory and imports the same ``rdmaspawn`` as this process.
    """
    if method == "verbs":
        require_verbs()
    with tempfile.TemporaryDirectory(prefix="rdmaspawn-hazard-") as tmp:
        record = os.path.join(tmp, "hazard.json")
        script = os.path.join(tmp, "snippet.py")
        prelude = _PRELUDE.format(
            method=method, record=record, unavailable=HAZARD_UNAVAILABLE, tests=TESTS
        )
        with open(script, "w") as f:
            f.write(prelude + textwrap.dedent(code))
        result = subprocess.run(
            [sys.executable, script],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        hazard: dict[str, Any] | None = None
        if os.path.exists(record):
            with open(record) as f:
                hazard = json.load(f)
    if result.returncode == HAZARD_UNAVAILABLE and "rdmaspawn-hazard:" in result.stderr:
        reason = result.stderr.strip().splitlines()[-1]
        if method != "verbs":
            pytest.fail(reason, pytrace=False)
        if _require_verbs_env():
            pytest.fail(reason + " but RDMASPAWN_REQUIRE_VERBS=1", pytrace=False)
        pytest.skip(reason)
    run = HazardRun(result.args, result.returncode, result.stdout, result.stderr)
    run.hazard = hazard
    return run


# A child interpreter that maps files and marks them MADV_DONTFORK with a real
# madvise(), optionally plants the hazard, imports rdmaspawn's engine, drops to
# another uid, then prints what it did as JSON and waits for a line on stdin.
_HOLDER = """\
import ctypes, json, mmap, os, sys
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep, marked = [], {}
for path in cfg["files"]:
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)
    os.close(fd)
    keep.append(m)
    for line in open("/proc/self/maps"):
        if line.rstrip("\\n").endswith(" " + path):
            start = int(line.split("-")[0], 16)
    if libc.madvise(start, mmap.PAGESIZE, 10) != 0:
        raise OSError(ctypes.get_errno(), "madvise")
    marked[path] = start
info = {"pid": os.getpid(), "marked": marked, "hazard": None}
if cfg["plant"]:
    import dataclasses
    from rdmaspawn.testing.hazard import plant
    info["hazard"] = dataclasses.asdict(plant(cfg["plant"]))
if cfg["engine"]:
    import rdmaspawn._native.engine
if cfg["uid"] is not None:
    os.setgroups([])
    os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
print(json.dumps(info), flush=True)
sys.stdin.readline()
"""


class Holder:
    """A live child process holding MADV_DONTFORK memory (see ``_HOLDER``); a context manager.

    ``files``: paths to map one page of and mark DONTFORK; ``plant``: a
    :func:`~rdmaspawn.testing.hazard.plant` method or None; ``engine``: import
    rdmaspawn's engine; ``uid``: setresuid() to it once ready (root only);
    ``options``: interpreter options before ``-c`` (``-X`` takes any text).
    ``info`` is what the child printed: ``pid``, ``marked`` (path -> address),
    ``hazard`` (the planted Hazard as a dict, or None).
    """

    def __init__(self, files: list[str] = [], plant: str | None = None, engine: bool = False,
                 uid: int | None = None, options: list[str] = []) -> None:
        cfg = json.dumps({"files": files, "plant": plant, "engine": engine, "uid": uid})
        self.proc = subprocess.Popen([sys.executable, *options, "-c", _HOLDER, cfg], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.communicate(timeout=30)
            raise RuntimeError(f"holder child failed (status {self.proc.returncode})")
        self.info: dict[str, Any] = json.loads(line)
        self.pid: int = self.info["pid"]

    def __enter__(self) -> Holder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.communicate("\n", timeout=30)


def mappable_device() -> str | None:
    """A block device under /dev this process may open and map (read-only, never touched).

    Real device mappings for the "devices" tests; usually only root may open one.
    """
    for name in sorted(os.listdir("/dev")):
        path = os.path.join("/dev", name)
        try:
            if not stat.S_ISBLK(os.stat(path).st_mode):
                continue
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ).close()
            return path
        except OSError:
            continue
        finally:
            os.close(fd)
    return None


def shm_file(tmp_name: str) -> str:
    """A one-page file in /dev/shm (POSIX shared memory), removed by the caller."""
    path = f"/dev/shm/{tmp_name}-{os.getpid()}"
    with open(path, "wb") as f:
        f.write(b"\0" * mmap.PAGESIZE)
    return path


#: Code for a child interpreter: ``drop_capabilities()`` empties the effective
#: capability set with a real capset(2), as root in a container without
#: capabilities has it.  (On Linux 6.18 clearing CAP_SYS_PTRACE alone still let
#: root read a non-dumpable process's smaps, though not its exe link.)
DROP_CAPS = """
import ctypes
def drop_capabilities():
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} x 2
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0] = data[3] = 0  # effective, both words
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
"""


def verbs_file() -> str | None:
    """The file libibverbs.so.1 resolves to (as a child's /proc/self/maps shows it), else None."""
    probe = subprocess.run(
        [sys.executable, "-c", _VERBS_PROBE + "; print([l.split()[-1] for l in "
         "open('/proc/self/maps') if 'libibverbs' in l][0])"],
        capture_output=True, text=True, check=False)
    return probe.stdout.strip() if probe.returncode == 0 else None


def torch_available() -> bool:
    """Whether torch, with gloo, imports (probed in a child)."""
    return works_in_child(_TORCH_PROBE)


def require_torch() -> None:
    """Skip (or, under RDMASPAWN_REQUIRE_TORCH=1, fail) when torch is missing."""
    _require(torch_available(), "torch is not installed (pip install torch; CI: on 3.11)",
             "RDMASPAWN_REQUIRE_TORCH")
