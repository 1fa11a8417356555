"""dropin/posixspawn.py: Popen._posix_spawn on the engine, its arguments read by name."""
from __future__ import annotations

import inspect
import subprocess

import pytest

from rdmaspawn.dropin import posixspawn

SIGNATURE = inspect.signature(subprocess.Popen._posix_spawn)  # type: ignore[attr-defined]


def test_arguments_are_read_as_signature_bind_reads_them() -> None:
    """The parameters read from _posix_spawn's code object (inspect stays out of
    start-up) bind a call as inspect.Signature.bind does: all positional, as
    _execute_child calls it, or the last one by keyword; a missing or an
    unknown argument is a TypeError on both."""
    params = list(SIGNATURE.parameters)
    values = tuple(f"value-{name}" for name in params)
    bound = dict(SIGNATURE.bind(*values).arguments)
    assert posixspawn._bind(values, {}) == bound
    assert list(posixspawn._bind(values, {})) == params
    assert posixspawn._bind(values[:-1], {params[-1]: values[-1]}) == bound

    for args, kwargs in ((values[:-1], {}), (values, {"no_such": 1}),
                         (values, {params[-1]: values[-1]})):
        with pytest.raises(TypeError):
            SIGNATURE.bind(*args, **kwargs)
        with pytest.raises(TypeError):
            posixspawn._bind(args, kwargs)
