"""python -m rdmaspawn demo: end to end, in its own child interpreters."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from helpers import standin_verbs
from helpers.hazard import require_verbs, verbs_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The console script pip installed beside this interpreter.
SCRIPT = os.path.join(os.path.dirname(sys.executable), "rdmaspawn")


@pytest.mark.parametrize("cwd", [ROOT, "/"], ids=["repo-root", "slash"])
@pytest.mark.parametrize("how", ["script", "module"])
def test_demo_end_to_end(cwd: str, how: str) -> None:
    """The demo plants the hazard in a helper, fork()ed children die of SIGSEGV, rdmaspawn's
    exits 0, the doctor says HAZARD; exit 0. From the checkout's root (whose src/ must not
    be imported) and from /, as the console script and as ``python -m``."""
    cmd = [SCRIPT] if how == "script" else [sys.executable, "-m", "rdmaspawn"]
    r = subprocess.run(cmd + ["demo"], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "HAZARD" in out
    assert out.count("killed by SIGSEGV") == 2
    assert "rdmaspawn.Popen(...).wait()            -> exit 0" in out
    assert "Traceback" not in r.stderr


def test_main_without_command_prints_help() -> None:
    """`python -m rdmaspawn` alone prints the commands and exits 2."""
    r = subprocess.run([sys.executable, "-m", "rdmaspawn"], capture_output=True, text=True)
    assert r.returncode == 2
    for cmd in ("doctor", "demo", "bench"):
        assert cmd in r.stdout


def test_demo_says_it_planted_through_libibverbs() -> None:
    """With libibverbs installed the demo says it planted through it, and names the file."""
    require_verbs()
    r = subprocess.run([sys.executable, "-m", "rdmaspawn", "demo"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"   through libibverbs \(/\S+/libibverbs\.so\.1\.[\d.]+\): "
                     r"ibv_fork_init\(\), then ibv_dontfork_range\(\)", r.stdout), r.stdout


def test_demo_with_a_libibverbs_without_is_fork_initialized(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """rdma-core 33 (Debian 11) has no ibv_is_fork_initialized(): the demo plants
    through it and goes as expected (issue 48, item 1: it exited 1)."""
    lib = standin_verbs.build(tmp_path_factory, standin_verbs.RDMA_CORE_33)
    r = subprocess.run([sys.executable, "-m", "rdmaspawn", "demo"], capture_output=True,
                       text=True, timeout=120,
                       env=dict(os.environ, LD_LIBRARY_PATH=str(lib.parent)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"   through libibverbs ({lib}): ibv_fork_init()" in r.stdout, r.stdout


def test_demo_without_libibverbs_says_it_fell_back() -> None:
    """With libibverbs hidden (an empty file bind-mounted over it in a private mount
    namespace, so dlopen() really fails), the demo plants with madvise, says why, and how to
    get the real library; the demonstration still goes as expected."""
    require_verbs()
    library = verbs_file()
    assert library is not None
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else \
        ["unshare", "--map-root-user", "--mount"]
    hide = f"mount --bind /dev/null {library} && exec \"$@\""
    r = subprocess.run(unshare + ["sh", "-c", hide, "sh", sys.executable, "-m", "rdmaspawn",
                                  "demo"], capture_output=True, text=True, timeout=120)
    if "mount" in r.stderr and r.returncode != 0 and "Planted" not in r.stdout:
        pytest.skip(f"cannot hide libibverbs here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("   with madvise(MADV_DONTFORK) directly, not through libibverbs:\n"
            "   cannot load libibverbs.so.1 (to get it: apt-get install libibverbs1, or dnf "
            "install libibverbs).\n"
            "   Install it to watch the real ibv_dontfork_range() mark the same pages.\n"
            ) in r.stdout
    assert r.stdout.count("killed by SIGSEGV") == 2
