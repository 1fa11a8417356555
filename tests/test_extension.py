"""csrc/python/ as the extension module rdmaspawn._native._capi.

Its init lives in the cffi-built library, and rdmaspawn/_native/capi.py loads
it from that same file: the loader finds the file open and hands back its
handle, so the two modules share every static. No spawn path needs ctypes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from helpers.child import python_argv

from rdmaspawn import _rdmaspawn_cffi
from rdmaspawn._native import capi
from rdmaspawn._native.request import SpawnRequest

TRUE = b"/bin/true"


def test_the_extension_is_the_cffi_modules_file() -> None:
    module = sys.modules["rdmaspawn._native._capi"]
    assert module.__file__ == _rdmaspawn_cffi.__file__
    assert capi.spawn_request is module.spawn_request


def test_a_spawn_through_the_extension_is_counted_by_the_cffi_module() -> None:
    """rs_spawn_count()'s counter is a static of the engine: a spawn the
    extension makes is seen through cffi only where both are one copy."""
    before = _rdmaspawn_cffi.lib.rs_spawn_count()
    pid, pidfd = capi.spawn_request(SpawnRequest([TRUE], [TRUE]), None)
    if pidfd >= 0:
        os.close(pidfd)
    assert os.waitpid(pid, 0)[1] == 0
    assert _rdmaspawn_cffi.lib.rs_spawn_count() == before + 1


_EVERY_SPAWN_PATH = """
    import json, os, subprocess, sys
    import rdmaspawn
    from rdmaspawn._native import engine
    after = {"import": "ctypes" in sys.modules}
    before = engine.spawn_count()
    rdmaspawn.Popen(["/bin/true"]).wait()
    after["Popen"] = "ctypes" in sys.modules
    with rdmaspawn.patched():
        subprocess.run(["/bin/true"], check=True)
        after["patch() + run"] = "ctypes" in sys.modules
        # posix_spawn's conditions on 3.9-3.12 (and 3.13+)
        subprocess.run(["/bin/true"], close_fds=False, check=True)
        after["posix_spawn"] = "ctypes" in sys.modules
    pid, pidfd = rdmaspawn.spawn([b"/bin/true"], [b"/bin/true"])
    os.waitpid(pid, 0)
    after["spawn()"] = "ctypes" in sys.modules
    print(json.dumps({"ctypes": after, "spawns": engine.spawn_count() - before}))
"""


def test_no_spawn_path_imports_ctypes() -> None:
    res = subprocess.run(python_argv(textwrap.dedent(_EVERY_SPAWN_PATH)),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout.splitlines()[-1])
    assert report["spawns"] == 4  # each through the engine
    assert report["ctypes"] == dict.fromkeys(
        ["import", "Popen", "patch() + run", "posix_spawn", "spawn()"], False)


def test_every_returned_singleton_is_a_new_reference() -> None:
    """The module is built once (abi3) and loaded by 3.9-3.15. The 3.12+
    headers make Py_RETURN_NONE and its kin a bare return of an immortal
    object, even for the limited API, so a module built with them and loaded
    by 3.9-3.11 frees the object ("deallocating NotImplemented" at exit).
    None of those macros is used, and a builtin that answers NotImplemented
    leaves its count as it was, whichever headers built this one."""
    here = os.path.dirname(os.path.abspath(__file__))
    csrc = os.path.join(os.path.dirname(here), "csrc", "python")
    used = [(name, line.strip()) for name in sorted(os.listdir(csrc))
            if name.endswith((".c", ".h"))
            for line in open(os.path.join(csrc, name), encoding="utf-8")
            if "Py_RETURN_" in line and "not Py_RETURN_" not in line
            and not line.lstrip().startswith(("/*", "*"))]
    assert used == []
    before = sys.getrefcount(NotImplemented)
    for _ in range(1000):
        assert capi.spawn_posix(()) is NotImplemented
    assert sys.getrefcount(NotImplemented) == before
