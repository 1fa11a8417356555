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
        from rdmaspawn import _engine
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
``sys.path``, so test modules can ``from hazard_helpers import run_with_hazard``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

import pytest

__all__ = [
    "HAZARD_UNAVAILABLE",
    "HazardRun",
    "require_torch",
    "require_verbs",
    "run_with_hazard",
    "torch_available",
    "verbs_available",
]

#: Exit status of the child when plant() raised HazardError.
HAZARD_UNAVAILABLE = 77

_PRELUDE = """\
import dataclasses, json, os, signal, sys

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


@functools.lru_cache(maxsize=None)
def _works_in_child(code: str) -> bool:
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


def verbs_available() -> bool:
    """Whether libibverbs.so.1 loads (probed in a child, so pytest never maps it)."""
    return _works_in_child(_VERBS_PROBE)


def require_verbs() -> None:
    """Skip (or, under RDMASPAWN_REQUIRE_VERBS=1, fail) when libibverbs is missing."""
    _require(verbs_available(), "libibverbs.so.1 is not installed (apt-get install libibverbs1)",
             "RDMASPAWN_REQUIRE_VERBS")


def pyverbs_available() -> bool:
    """Whether ``import pyverbs.fork`` works (probed in a child)."""
    return _works_in_child(_PYVERBS_PROBE)


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
            method=method, record=record, unavailable=HAZARD_UNAVAILABLE
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


def torch_available() -> bool:
    """Whether torch, with gloo, imports (probed in a child)."""
    return _works_in_child(_TORCH_PROBE)


def require_torch() -> None:
    """Skip (or, under RDMASPAWN_REQUIRE_TORCH=1, fail) when torch is missing."""
    _require(torch_available(), "torch is not installed (pip install torch; CI: on 3.11)",
             "RDMASPAWN_REQUIRE_TORCH")
