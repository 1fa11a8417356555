"""The spawners compared, each one spawn of the benchmark's child and its wait, in
the order the report lists them (their labels say what each is, in Python).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any, Callable

from rdmaspawn._native.engine import spawn as engine_spawn
from rdmaspawn.dropin.popen import Popen as RdmaspawnPopen
from rdmaspawn.dropin.posixspawn import posix_spawn_method

from .build import Built
from .model import DEFAULT_PATH, ENGINE, FLOOR, OK, PATCHED, RDMASPAWN, UNAVAILABLE, SpawnerInfo


class PatchedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` as ``rdmaspawn.patch()`` leaves it: CPython's own
    ``_execute_child`` calling rdmaspawn's ``fork_exec``, and rdmaspawn's
    ``_posix_spawn``; no pidfd, no SIGINT hold (those are rdmaspawn.Popen's)."""

    _execute_child = RdmaspawnPopen._execute_child
    _posix_spawn = posix_spawn_method


@dataclass
class Spawner:
    id: str
    label: str
    call: Callable[[], None] | None  # one spawn + wait; raises on failure; None for the floor
    status: str = OK
    reason: str = ""
    in_process: bool = True  # False for the floor: its own process, its own memory

    def info(self) -> SpawnerInfo:
        return SpawnerInfo(self.id, self.label, self.status, self.reason, self.in_process)


def _check_status(what: str, status: int) -> None:
    if status != 0:
        raise RuntimeError(f"{what}: child exit status {status}")


def _preexec_noop() -> None:
    """Does nothing; its presence makes subprocess fork instead of vfork."""


def make_spawners(built: Built) -> list[Spawner]:
    """Every spawner, in the order the report lists them."""
    path = built.child
    bpath = os.fsencode(path)
    argv = [path]

    def popen(what: str, cls: Any, **kw: Any) -> Callable[[], None]:
        return lambda: _check_status(what, cls(argv, **kw).wait())

    def waitpid(what: str, pid: int) -> None:
        _check_status(what, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

    def engine() -> None:
        pid, pidfd = engine_spawn([bpath], [bpath])
        if pidfd >= 0:
            os.close(pidfd)
        waitpid("engine", pid)

    floor = Spawner(FLOOR, "C loop: posix_spawn + waitpid (own process)", None, in_process=False)
    if built.floor is None:
        floor.status, floor.reason = UNAVAILABLE, built.floor_reason
    return [
        Spawner(RDMASPAWN, "rdmaspawn.Popen(argv).wait()",
                popen("rdmaspawn.Popen", RdmaspawnPopen)),
        Spawner(ENGINE, "rdmaspawn._native.engine.spawn + os.waitpid", engine),
        Spawner(DEFAULT_PATH, "subprocess.Popen(argv).wait() (CPython default path)",
                popen("subprocess.Popen", subprocess.Popen)),
        Spawner(PATCHED, "subprocess.Popen(argv).wait() under rdmaspawn.patch()",
                popen("subprocess.Popen under patch()", PatchedPopen)),
        # preexec_fn forces fork(): that is the path this spawner measures.
        Spawner("subprocess-fork", "subprocess.Popen(argv, preexec_fn=...) (fork)",
                popen("subprocess.Popen(preexec_fn)", subprocess.Popen, preexec_fn=_preexec_noop)),
        Spawner("posix_spawn", "os.posix_spawn + os.waitpid",
                lambda: waitpid("os.posix_spawn", os.posix_spawn(path, argv, os.environ))),
        floor,
    ]
