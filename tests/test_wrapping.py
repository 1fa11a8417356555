"""rdmaspawn.dropin.wrapping: taking one wrapper out of a ``__wrapped__`` chain."""
from __future__ import annotations

import types

from rdmaspawn.dropin import wrapping as _wrapping


def _wrapper(inner):
    def w(*a):
        return w.__wrapped__(*a)

    w.__wrapped__ = inner
    return w


def test_splice_out_the_attribute_itself():
    def base():
        return "base"

    owner = types.SimpleNamespace()
    mine = _wrapper(base)
    owner.f = mine
    assert _wrapping.splice_out(owner, "f", mine)
    assert owner.f is base


def test_splice_out_from_under_a_later_wrapper():
    """Someone wrapped ours since: ours leaves their chain, theirs stays on top."""
    def base():
        return "base"

    owner = types.SimpleNamespace()
    mine = _wrapper(base)
    theirs = _wrapper(mine)
    owner.f = theirs
    assert _wrapping.splice_out(owner, "f", mine)
    assert owner.f is theirs and theirs.__wrapped__ is base
    assert owner.f() == "base"
    assert _wrapping.innermost(owner.f) is base


def test_splice_out_without_wrapped_uses_below():
    def base():
        return "base"

    def mine():
        return "mine"

    owner = types.SimpleNamespace(f=mine)
    assert _wrapping.splice_out(owner, "f", mine, base)
    assert owner.f is base


def test_not_in_the_chain_changes_nothing():
    def base():
        return "base"

    stranger = _wrapper(base)
    owner = types.SimpleNamespace(f=base)
    assert not _wrapping.splice_out(owner, "f", stranger)
    assert owner.f is base


def test_cycle_raises_instead_of_hanging():
    import pytest

    a = _wrapper(None)
    b = _wrapper(a)
    a.__wrapped__ = b
    with pytest.raises(RuntimeError, match="cycle"):
        _wrapping.innermost(a)
