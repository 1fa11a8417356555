"""ChildSetup called as Python code (its stock preexec_fn path) against the engine.

Under stock CPython, or where rdmaspawn must fork (a setup keyword chained
with an unrecognised preexec_fn), a ChildSetup runs as Python code in the
forked child. Each value must give there what the engine gives for it.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

import rdmaspawn
from rdmaspawn import preexec as P

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "setup_probe.py")


def _probe(popen: object, **kwargs: object) -> dict:
    out = popen([sys.executable, PROBE], stdout=subprocess.PIPE, **kwargs)  # type: ignore[operator]
    return json.loads(out.communicate()[0])  # type: ignore[no-any-return]


def test_infinite_rlimit_on_both_paths() -> None:
    """rlimit(res, -1, -1) (RLIM_INFINITY) sets an unlimited limit when the
    value runs as Python code in a forked child, as the engine does; it
    raised in the child before (the all-ones value is out of setrlimit's range)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard != resource.RLIM_INFINITY:
        pytest.skip("needs an unlimited hard RLIMIT_CORE")
    setup = P.rlimit(resource.RLIMIT_CORE, -1, -1)
    forked = _probe(subprocess.Popen, preexec_fn=setup)
    engine = _probe(rdmaspawn.Popen, preexec_fn=setup)
    # A keyword next to a preexec_fn that needs fork: the setup runs as Python too.
    chained = _probe(rdmaspawn.Popen, rlimits={resource.RLIMIT_CORE: (-1, -1)},
                     preexec_fn=lambda: None)
    # RLIM_INFINITY reads back as -1 on 3.9-3.14, as 2**64-1 (unsigned) on 3.15.
    unlimited = [resource.RLIM_INFINITY] * 2
    assert forked["core"] == engine["core"] == chained["core"] == unlimited


@pytest.mark.parametrize("path", ["", "not-a-cgroup-dir", "no-such-dir"])
def test_cgroup_that_is_not_one_fails_without_writing(path: str, tmp_path: object,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """cgroup('') and a directory that is no cgroup fail on the Python path
    (FileNotFoundError in the child: CPython's "Exception occurred in
    preexec_fn.") and leave no stray cgroup.procs behind, as the engine
    raises FileNotFoundError and writes nothing."""
    monkeypatch.chdir(str(tmp_path))
    os.mkdir("not-a-cgroup-dir")
    setup = P.cgroup(path)
    with pytest.raises(FileNotFoundError):
        setup()
    with pytest.raises(FileNotFoundError):
        rdmaspawn.run(["true"], preexec_fn=setup)
    with pytest.raises(subprocess.SubprocessError, match="preexec_fn"):
        subprocess.run(["true"], preexec_fn=setup)
    with pytest.raises(subprocess.SubprocessError, match="preexec_fn"):
        rdmaspawn.run(["true"], cgroup=path, preexec_fn=lambda: None)
    assert sorted(os.listdir(".")) == ["not-a-cgroup-dir"]
    assert os.listdir("not-a-cgroup-dir") == []
