"""rdmaspawn.Popen's setup keywords fold into preexec_fn, wherever the caller put it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import rdmaspawn
from rdmaspawn.dropin import cpython as _cpython

# The child reports whether it leads a session and its niceness.
_REPORT = "import os; print(os.getsid(0) == os.getpid(), os.nice(0))"


def _report(*args: object, **kwargs: object) -> str:
    with rdmaspawn.Popen(*args, **kwargs) as p:
        out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    return out.decode().strip()


@pytest.mark.parametrize("positional", [True, False])
def test_setup_keyword_joins_a_users_preexec_fn(positional: bool) -> None:
    """``nice=`` and the user's own ``os.setsid`` both take effect, whether
    preexec_fn came by position (the table's POPEN_PREEXEC_FN_POSITION) or by
    keyword."""
    base = os.nice(0)
    argv = [sys.executable, "-c", _REPORT]
    if positional:
        args = [argv, -1, None, None, subprocess.PIPE, None, os.setsid]
        assert len(args) == _cpython.require().preexec_fn_position + 1
        out = _report(*args, nice=3)
    else:
        out = _report(argv, stdout=subprocess.PIPE, preexec_fn=os.setsid, nice=3)
    assert out == f"True {base + 3}"


def test_no_setup_keyword_leaves_the_call_alone() -> None:
    out = _report([sys.executable, "-c", _REPORT], stdout=subprocess.PIPE)
    assert out == f"False {os.nice(0)}"
