"""rdmaspawn under the real DONTFORK hazard.

Each test plants the hazard in a child interpreter (helpers.hazard), proves
it is live there (an os.fork() child dies with SIGSEGV), then spawns through
every rdmaspawn path and through the standard library after patch(): all must
succeed, and the children must see what CPython's children see without the
hazard.
"""
from __future__ import annotations

import os
import subprocess

import pytest
from helpers.hazard import run_with_hazard
from helpers.probe import FLAGS, all_combinations, probe_path, run_combinations
from helpers.report import last_json

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ["verbs", "madvise"]

# Runs first in every snippet: the hazard must be live, or the test proves nothing.
FORK_DIES = f"""
sys.path.insert(0, {HERE!r})
pid = os.fork()
if pid == 0:
    os._exit(0)
assert describe(os.waitpid(pid, 0)[1]) == "signal SIGSEGV", "hazard not live"
"""


def _as_main(body: str) -> str:
    """multiprocessing's spawn re-imports the main module: guard the body."""
    import textwrap

    code = FORK_DIES + textwrap.dedent(body)
    return "if __name__ == '__main__':\n" + textwrap.indent(code, "    ")



@pytest.mark.parametrize("method", METHODS)
def test_every_rdmaspawn_path_survives(method):
    """Engine (both clone paths), Popen, run, and patched stdlib paths all work."""
    res = run_with_hazard(_as_main("""
import asyncio, json, subprocess, multiprocessing
import rdmaspawn
from subprocess import Popen as EarlyPopen  # imported before the patch
out = {}
for force in (False, True):
    pid, _ = rdmaspawn.spawn([b"true"], [b"/bin/true"], force_clone=force)
    out["engine", force] = describe(os.waitpid(pid, 0)[1])
out["Popen"] = rdmaspawn.Popen(["/bin/echo", "x"], stdout=subprocess.PIPE).communicate()[0].decode()
out["run"] = rdmaspawn.run("echo $0", shell=True, capture_output=True, text=True).stdout
try:
    rdmaspawn.Popen(["/bin/true"], preexec_fn=lambda: None)
    out["preexec"] = "ran"
except rdmaspawn.PreexecFnError as exc:
    out["preexec"] = "refused" if "cwd=" in str(exc) else str(exc)
rdmaspawn.patch()
out["patched Popen"] = EarlyPopen(["/bin/echo", "y"], stdout=subprocess.PIPE).communicate()[0].decode()
out["check_output"] = subprocess.check_output(["/bin/echo", "z"], user="nobody", group="nogroup").decode() if os.geteuid() == 0 else "z\\n"
out["os.popen"] = os.popen("echo p").read()
out["os.spawnv"] = os.spawnv(os.P_WAIT, "/bin/sh", ["sh", "-c", "exit 5"])
async def main():
    p = await asyncio.create_subprocess_exec("/bin/echo", "a", stdout=asyncio.subprocess.PIPE)
    data, _ = await p.communicate()
    return data.decode(), p.returncode
out["asyncio"] = asyncio.run(main())
ctx = multiprocessing.get_context("spawn")
with ctx.Pool(1) as pool:
    out["mp spawn"] = pool.apply(abs, (-3,))
print(json.dumps({repr(k): v for k, v in out.items()}))
"""), method, timeout=240)
    # 240 s bounds a hang only: the snippet (11 spawns, a spawn Pool's
    # interpreter) took 61 s in the arm64 VM beside four busy processes.
    out = last_json(res)
    assert out == {
        "('engine', False)": "exit 0",
        "('engine', True)": "exit 0",
        "'Popen'": "x\n",
        "'run'": "/bin/sh\n",
        "'preexec'": "refused",
        "'patched Popen'": "y\n",
        "'check_output'": "z\n",
        "'os.popen'": "p\n",
        "'os.spawnv'": 5,
        "'asyncio'": ["a\n", 0],
        "'mp spawn'": 3,
    }


@pytest.mark.parametrize("method", METHODS)
def test_forkserver_after_patch(method):
    """multiprocessing's forkserver is started through the engine after patch()."""
    res = run_with_hazard(_as_main("""
import json, multiprocessing, rdmaspawn
rdmaspawn.patch()
ctx = multiprocessing.get_context("forkserver")
with ctx.Pool(1) as pool:
    print(json.dumps(pool.apply(abs, (-4,))))
"""), method, timeout=120)
    assert last_json(res) == 4


def test_every_combination_matches_cpython_without_hazard():
    """All combinations of the declarative arguments, under the hazard, through
    rdmaspawn.Popen and patched subprocess.Popen, give the child exactly what
    CPython's subprocess gives it in a process without the hazard."""
    probe = probe_path()
    expected = run_combinations(subprocess.Popen, probe)
    assert len(expected) == 2 ** len(FLAGS)
    res = run_with_hazard(FORK_DIES + f"""
import json, subprocess, rdmaspawn
from helpers.probe import run_combinations
ours = run_combinations(rdmaspawn.Popen, {probe!r})
rdmaspawn.patch()
patched = run_combinations(subprocess.Popen, {probe!r})
print(json.dumps([ours, patched]))
""", "auto", timeout=600)
    ours, patched = last_json(res)
    combos = all_combinations()
    for name, got in (("rdmaspawn.Popen", ours), ("patched subprocess.Popen", patched)):
        for flags, want, have in zip(combos, expected, got):
            assert have == want, (name, flags)
