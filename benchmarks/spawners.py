"""The spawners compared, each one spawn of the benchmark's child and its wait, in
the order the report lists them (their labels say what each is, in Python).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Callable

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

    def rdmaspawn_popen() -> None:
        _check_status("rdmaspawn.Popen", RdmaspawnPopen(argv).wait())

    def engine() -> None:
        pid, pidfd = engine_spawn([bpath], [bpath])
        if pidfd >= 0:
            os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        _check_status("engine", os.waitstatus_to_exitcode(status))

    def subprocess_default() -> None:
        _check_status("subprocess.Popen", subprocess.Popen(argv).wait())

    def subprocess_patched() -> None:
        _check_status("subprocess.Popen under patch()", PatchedPopen(argv).wait())

    def subprocess_fork() -> None:
        # preexec_fn forces fork(): that is the path this spawner measures.
        p = subprocess.Popen(argv, preexec_fn=_preexec_noop)  # noqa: PLW1509
        _check_status("subprocess.Popen(preexec_fn)", p.wait())

    def posix_spawn() -> None:
        pid = os.posix_spawn(path, argv, os.environ)
        _, status = os.waitpid(pid, 0)
        _check_status("os.posix_spawn", os.waitstatus_to_exitcode(status))

    floor = Spawner(FLOOR, "C loop: posix_spawn + waitpid (own process)", None, in_process=False)
    if built.floor is None:
        floor.status, floor.reason = UNAVAILABLE, built.floor_reason
    return [
        Spawner(RDMASPAWN, "rdmaspawn.Popen(argv).wait()", rdmaspawn_popen),
        Spawner(ENGINE, "rdmaspawn._native.engine.spawn + os.waitpid", engine),
        Spawner(DEFAULT_PATH, "subprocess.Popen(argv).wait() (CPython default path)",
                subprocess_default),
        Spawner(PATCHED, "subprocess.Popen(argv).wait() under rdmaspawn.patch()",
                subprocess_patched),
        Spawner("subprocess-fork", "subprocess.Popen(argv, preexec_fn=...) (fork)",
                subprocess_fork),
        Spawner("posix_spawn", "os.posix_spawn + os.waitpid", posix_spawn),
        floor,
    ]
