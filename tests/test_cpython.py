"""rdmaspawn.dropin.cpython: the table of CPython's private internals, and the
refusal of a CPython whose subprocess does not match it."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rdmaspawn.dropin import cpython as _cpython


def test_this_cpython_is_known_and_matches():
    """The running CPython is in the table and its _execute_child calls
    fork_exec with the arguments the table names."""
    internals = _cpython.require()
    assert internals is _cpython.TABLE[sys.version_info[:2]]
    assert len(internals.params) == (23 if sys.version_info >= (3, 11) else 21)
    module, attr = internals.home
    assert getattr(sys.modules[module], attr) is not None


def test_get_handles_cleanup_is_this_cpythons():
    """The table says whether Popen._get_handles closes its pipes on a failure;
    CPython's code for that is the _on_error_fd_closer it added with it."""
    assert (_cpython.require().get_handles_cleans_up
            == hasattr(subprocess.Popen, "_on_error_fd_closer"))


def test_unknown_version_is_refused_by_name():
    with pytest.raises(_cpython.UnsupportedPython, match=r"CPython 3\.99"):
        _cpython._check((3, 99))


def test_unpack_names_every_argument():
    params = _cpython.require().params
    call = _cpython.unpack_fork_exec(tuple(range(len(params))))
    assert call.preexec_fn == params.index("preexec_fn")
    assert call.errpipe_write == params.index("errpipe_write")
    if "allow_vfork" not in params:
        assert (call.pgid_to_set, call.allow_vfork) == (-1, True)
    with pytest.raises(TypeError):
        _cpython.unpack_fork_exec(tuple(range(len(params) + 1)))


@pytest.mark.parametrize("value, parser, message", [
    (2**31, "format_i", "signed integer is greater than maximum"),
    (-2**31 - 1, "format_i", "signed integer is less than minimum"),
    (2**63, "format_i", "Python int too large to convert to C long"),
    (2**31, "clinic", "Python int too large to convert to C int"),
    (-2**63 - 1, "clinic", "Python int too large to convert to C int"),
])
def test_c_int_overflow_messages(value, parser, message):
    with pytest.raises(OverflowError, match=message):
        _cpython.c_int(value, parser)


def test_a_changed_execute_child_is_refused_before_anything_starts():
    """A CPython whose _execute_child passes fork_exec other arguments (here
    one fewer) makes rdmaspawn.Popen and patch() fail at once, naming the
    version, with no child started and no fd left open."""
    code = textwrap.dedent(r"""
        import os, subprocess, sys, types
        src = subprocess.Popen._execute_child
        # The same function with the call's last argument dropped, as a CPython
        # that changed fork_exec's signature would have it.
        import inspect, re, textwrap as tw
        text = tw.dedent(inspect.getsource(src))
        text, n = re.subn(r"umask,(\s+)preexec_fn", r"\1preexec_fn", text, count=1)
        assert n == 1
        ns = dict(vars(subprocess))
        exec(text, ns)
        subprocess.Popen._execute_child = ns["_execute_child"]
        import rdmaspawn
        fds = sorted(os.listdir("/proc/self/fd"))
        out = []
        for call in (lambda: rdmaspawn.Popen(["/bin/true"], stdout=subprocess.PIPE),
                     rdmaspawn.patch):
            try:
                call()
                out.append("ok")
            except Exception as e:
                out.append((type(e).__name__, str(e)))
        out.append(sorted(os.listdir("/proc/self/fd")) == fds)
        out.append(rdmaspawn.is_patched())
        print(repr(out))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    popen, patch, no_fd_leaked, patched = eval(res.stdout)
    version = f"CPython {sys.version_info[0]}.{sys.version_info[1]}"
    for outcome in (popen, patch):
        assert outcome[0] == "UnsupportedPython" and version in outcome[1], outcome
    assert no_fd_leaked and patched is False
