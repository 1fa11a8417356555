"""dropin/posixspawn.py: Popen._posix_spawn on the engine, its arguments read by name."""
from __future__ import annotations

import pytest

from rdmaspawn.dropin import posixspawn


def test_a_positional_call_is_read_as_signature_bind_reads_it() -> None:
    """_execute_child passes every argument positionally; the fast reading (the
    names zipped with the values) gives what Signature.bind gives, and a call
    with keywords, or with a count that is not this CPython's, goes to bind."""
    params = posixspawn._PARAMS
    values = tuple(f"value-{name}" for name in params[1:])
    bound = dict(posixspawn._SIGNATURE.bind("self", *values).arguments)
    assert posixspawn._arguments("self", values, {}) == bound
    assert list(bound) == list(params)

    last = params[-1]
    as_keyword = posixspawn._arguments("self", values[:-1], {last: values[-1]})
    assert as_keyword == bound
    with pytest.raises(TypeError):
        posixspawn._arguments("self", values[:-1], {})
