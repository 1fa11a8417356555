"""The binary wheel works where no compiler is.

The wheel (abi3, manylinux) is installed with ``--only-binary :all:`` into a
fresh venv of the running CPython, with a PATH that holds nothing but that
venv (no cc, gcc, clang or zig), and used there from a directory that holds
no rdmaspawn source: it spawns under the planted hazard (where a fork()ed
child dies), through patch(), and runs ``rdmaspawn doctor``.

The wheel is the one named by RDMASPAWN_WHEEL (.ci/run builds it once per run
with scripts/build-wheels); without that variable this test builds it for
this machine's architecture first, with the running CPython (about a minute:
the build tools come from the package index). .ci/lanes/sid.sh runs this file
on the newest CPythons (3.14, 3.15) with .ci/run's wheel, and on the oldest
(3.9) with a wheel that Debian's 3.15 built.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.report import last_json

ROOT = Path(__file__).resolve().parent.parent
COMPILERS = ("cc", "gcc", "clang", "zig", "tcc")

# Runs in the wheel's venv.  The hazard is planted "auto": through the system
# libibverbs where it loads, else with madvise; either way a fork()ed child
# must die, or the smoke proves nothing.
SMOKE = r"""
import json, os, signal, subprocess, sys
import rdmaspawn
import rdmaspawn._rdmaspawn_cffi as core
from rdmaspawn.testing.hazard import plant

out = {"module": rdmaspawn.__file__, "core": core.__file__}
out["method"] = plant("auto").method

pid = os.fork()
if pid == 0:
    os._exit(0)
status = os.waitpid(pid, 0)[1]
out["fork"] = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else status

out["run"] = rdmaspawn.run(["/bin/echo", "spawned"], capture_output=True, text=True,
                           check=True).stdout.strip()
rdmaspawn.patch()
out["patched"] = rdmaspawn.is_patched()
# group= makes CPython 3.10+ fork (3.9 always does): only the engine survives here.
out["patched run"] = subprocess.run(["/bin/echo", "patched"], group=os.getgid(),
                                    capture_output=True, text=True, check=True).stdout.strip()
doctor = os.path.join(os.path.dirname(sys.executable), "rdmaspawn")
out["doctor on itself"] = subprocess.run([doctor, "doctor", "--pid", str(os.getpid())],
                                         capture_output=True).returncode
print(json.dumps(out))
"""


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: int = 300):
    res = subprocess.run(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(cmd)}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The x86_64 (or this machine's) wheel: RDMASPAWN_WHEEL, else built here."""
    given = os.environ.get("RDMASPAWN_WHEEL")
    if given:
        path = Path(given)
        assert path.is_file(), f"RDMASPAWN_WHEEL={given} is not a file"
        return path
    out = tmp_path_factory.mktemp("wheelhouse")
    _run(["bash", str(ROOT / "scripts" / "build-wheels"), "--arch", platform.machine(), str(out)],
         {**os.environ, "PYTHON": sys.executable}, ROOT, timeout=900)
    (path,) = out.glob(f"rdmaspawn-*-manylinux_*_{platform.machine()}.whl")
    return path


def test_wheel_is_abi3_manylinux(wheel):
    """One wheel for every CPython >= 3.9, for glibc 2.28 or older."""
    name = wheel.name
    assert "-cp39-abi3-" in name, name
    tag = name.rsplit("-", 1)[1].removesuffix(".whl")
    minors = [int(t.split("_")[2]) for t in tag.split(".") if t.startswith("manylinux_2_")]
    assert minors and max(minors) <= 28, name


def test_wheel_module_is_named_for_every_cpython(wheel):
    """The compiled module is ``*.abi3.so``, the one abi3 name that every
    CPython >= 3.9 imports, whichever CPython built the wheel (a 3.15 build
    would otherwise name it ``*.abi3-x86_64-linux-gnu.so``, which 3.9-3.14
    do not look for). .ci/lanes/sid.sh installs a 3.15-built wheel on 3.9."""
    with zipfile.ZipFile(wheel) as zf:
        modules = [n for n in zf.namelist() if n.endswith(".so")]
    assert modules == ["rdmaspawn/_rdmaspawn_cffi.abi3.so"], modules


def test_wheel_works_without_a_compiler(wheel, tmp_path):
    """Installs without building anything and spawns where fork() crashes."""
    venv = tmp_path / "venv"
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True, timeout=120)
    bindir = str(venv / "bin")
    env = {k: v for k, v in os.environ.items()
           if k not in ("CC", "CXX", "LDSHARED", "CFLAGS", "LDFLAGS", "PYTHONPATH")}
    env["PATH"] = bindir
    assert [c for c in COMPILERS if shutil.which(c, path=bindir)] == []
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    _run([f"{bindir}/python", "-m", "pip", "install", "-q", "--only-binary", ":all:",
          "--disable-pip-version-check", str(wheel)], env, cwd)
    res = _run([f"{bindir}/python", "-c", SMOKE], env, cwd, timeout=120)
    out = last_json(res)
    site = str(venv / "lib")
    assert out["module"].startswith(site) and out["core"].startswith(site), out
    assert out["core"].endswith(".abi3.so"), out
    assert out["fork"] == "SIGSEGV", out          # the hazard is real in this process
    assert out["run"] == "spawned" and out["patched"] is True, out
    assert out["patched run"] == "patched", out
    assert out["doctor on itself"] == 1, out      # 1: HAZARD
    doctor = subprocess.run([f"{bindir}/rdmaspawn", "doctor", "--json"], env=env, cwd=cwd,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr   # 0: OK, nothing planted
    json.loads(doctor.stdout)
