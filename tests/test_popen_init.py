"""rdmaspawn.Popen.__init__ and _wait as CPython's callers, subclasses and
introspection meet them: __init__ is a C method (csrc/python/popen_init.c)
that calls CPython's __init__ for rdmaspawn.Popen's own plain calls, and
hands any other to its face, a Python function with CPython's parameters
and the setup keywords, whose body calls the next __init__ in the MRO, as
super() finds it; introspection gets the face's answers."""
from __future__ import annotations

import copy
import inspect
import pickle
import subprocess
import sys
import typing
from unittest import mock

import pytest

import rdmaspawn
from rdmaspawn._child.model import build
from rdmaspawn.dropin import popen, setupkeywords

TRUE = [sys.executable, "-c", "pass"]
_STOCK_INIT = subprocess.Popen.__init__


def test_the_init_is_a_c_method_with_a_python_face() -> None:
    """__init__ is a C method descriptor (csrc/python/popen_init.c): the
    hold around CPython's __init__ costs no Python frame. Its face, whose
    answers introspection gets, is a Python function whose one statement
    calls the C body."""
    init = rdmaspawn.Popen.__dict__["__init__"]
    assert type(init).__name__ == "Popen_init_method"
    assert inspect.ismethoddescriptor(init)
    face = popen._init_face
    assert type(face) is type(_STOCK_INIT)
    assert face.__globals__["_init_body"].__name__ == "Popen_init"
    assert init.__globals__ is face.__globals__ is vars(popen)
    assert init.__code__ is face.__code__
    with pytest.raises(AttributeError) as stock:
        _ = _STOCK_INIT.nothing  # type: ignore[attr-defined]
    with pytest.raises(AttributeError) as ours:
        _ = init.nothing
    assert str(ours.value) == str(stock.value)


def test_unwrapping_a_bound_init_keeps_the_binding() -> None:
    """inspect.unwrap() of the __init__ bound to the class or to an instance
    is itself, as CPython's: 3.13.5's inspect.signature(cls) unwraps the
    bound __init__ that the descriptor returns (gh-119605; 3.13.0 does not),
    and a __wrapped__ there showed (self, *args, **kwargs)."""
    init = rdmaspawn.Popen.__dict__["__init__"]
    instance = rdmaspawn.Popen.__new__(rdmaspawn.Popen)
    for bound in (init.__get__(rdmaspawn.Popen, type), init.__get__(instance, rdmaspawn.Popen)):
        assert inspect.unwrap(bound) is bound
        assert "self" not in inspect.signature(bound).parameters


def test_called_every_way_a_method_is() -> None:
    """Popen(), an explicit Popen.__init__(self, ...), and a bound p.__init__."""
    p = rdmaspawn.Popen(TRUE)
    assert p.wait() == 0
    q = rdmaspawn.Popen.__new__(rdmaspawn.Popen)
    assert rdmaspawn.Popen.__init__(q, [sys.executable, "-c", "raise SystemExit(3)"]) is None
    assert q.wait() == 3
    bound = rdmaspawn.Popen.__new__(rdmaspawn.Popen).__init__
    assert bound.__self__ is not None
    bound(TRUE)
    assert bound.__self__.wait() == 0


@pytest.mark.parametrize("args, kwargs", [
    ((), {}),                                   # no args
    ((TRUE,), {"bogus": 1}),                    # an unknown keyword
    ((TRUE, "x"), {}),                          # bufsize not an int
    ((TRUE,), {"args": TRUE}),                  # args twice
])
def test_bad_calls_raise_as_cpythons(args: tuple, kwargs: dict) -> None:
    with pytest.raises(Exception) as stock:
        subprocess.Popen(*args, **kwargs).wait()
    with pytest.raises(Exception) as ours:
        rdmaspawn.Popen(*args, **kwargs).wait()
    assert type(ours.value) is type(stock.value)
    assert str(ours.value).replace("rdmaspawn.", "") == str(stock.value)


class _Recording(subprocess.Popen):  # type: ignore[type-arg]
    """A subprocess.Popen subclass of someone else's, mixed in after rdmaspawn.Popen."""

    calls: list[str] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.calls.append("__init__")
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def _wait(self, timeout: float | None) -> int | None:
        self.calls.append("_wait")
        return super()._wait(timeout)  # type: ignore[misc, no-any-return]


class _Mixed(rdmaspawn.Popen, _Recording):
    pass


class _Plain(rdmaspawn.Popen):
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.mine = True
        super().__init__(*args, **kwargs)


def test_classes_between_in_the_mro_are_called() -> None:
    """rdmaspawn.Popen's own __init__ and _wait reach a class that the MRO
    puts between them and CPython's, as super() does; the child is still
    the engine's (rdmaspawn's fork_exec ran)."""
    _Recording.calls.clear()
    assert [c.__name__ for c in _Mixed.__mro__[:4]] == ["_Mixed", "Popen", "PidfdMixin", "_Recording"]
    p = _Mixed([sys.executable, "-c", "raise SystemExit(4)"])
    assert p.wait() == 4
    assert _Recording.calls == ["__init__", "_wait"]


def test_a_subclass_init_calls_through_super() -> None:
    p = _Plain([sys.executable, "-c", "raise SystemExit(5)"])
    assert p.mine and p.wait() == 5


def test_a_wrapper_put_on_cpythons_init_later_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython's __init__ is looked up at each call, as super() would."""
    seen = []
    real = subprocess.Popen.__init__

    def wrapper(self: subprocess.Popen, *args: object, **kwargs: object) -> None:  # type: ignore[type-arg]
        seen.append(type(self).__name__)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess.Popen, "__init__", wrapper)
    assert rdmaspawn.Popen(TRUE).wait() == 0
    assert seen == ["Popen"]


# rdmaspawn.Popen.__init__ answers introspection as a Python function with
# CPython's own parameters, then the setup keywords, keyword-only, each with
# build()'s default: each answer compared with subprocess.Popen.__init__'s
# on the running CPython.
_SETUP_DEFAULTS = {keyword: build.__kwdefaults__[field]
                   for keyword, field in setupkeywords._POPEN_KWARGS.items()}


def test_getfullargspec_is_cpythons_plus_the_setup_keywords() -> None:
    stock = inspect.getfullargspec(_STOCK_INIT)
    ours = inspect.getfullargspec(rdmaspawn.Popen.__init__)
    assert ours._replace(kwonlyargs=ours.kwonlyargs[:len(stock.kwonlyargs)],
                         kwonlydefaults=None) == stock._replace(kwonlydefaults=None)
    assert ours.kwonlyargs[len(stock.kwonlyargs):] == list(_SETUP_DEFAULTS)
    assert ours.kwonlydefaults == {**(stock.kwonlydefaults or {}), **_SETUP_DEFAULTS}


def test_the_function_attributes_are_cpythons_plus_the_setup_keywords() -> None:
    init = rdmaspawn.Popen.__init__
    assert init.__defaults__ == _STOCK_INIT.__defaults__
    assert init.__kwdefaults__ == {**(_STOCK_INIT.__kwdefaults__ or {}), **_SETUP_DEFAULTS}
    code, stock = init.__code__, _STOCK_INIT.__code__
    assert (code.co_argcount, code.co_posonlyargcount) == (stock.co_argcount, stock.co_posonlyargcount)
    assert code.co_kwonlyargcount == stock.co_kwonlyargcount + len(_SETUP_DEFAULTS)
    assert code.co_flags & 0xF == stock.co_flags & 0xF  # OPTIMIZED|NEWLOCALS|VARARGS|VARKEYWORDS
    assert isinstance(init.__globals__, dict)
    assert (init.__name__, init.__qualname__, init.__module__) == ("__init__", "Popen.__init__", "rdmaspawn")
    assert init.__doc__ == _STOCK_INIT.__doc__


def test_type_hints_are_cpythons() -> None:
    assert typing.get_type_hints(rdmaspawn.Popen.__init__) == typing.get_type_hints(_STOCK_INIT)


def test_pickled_and_copied_as_cpythons() -> None:
    for fn in (_STOCK_INIT, rdmaspawn.Popen.__init__):
        assert pickle.loads(pickle.dumps(fn)) is fn
        assert copy.copy(fn) is fn and copy.deepcopy(fn) is fn


def test_the_class_signature_is_cpythons_plus_the_setup_keywords() -> None:
    """No ``self`` (3.13.5 showed one: gh-119605 unwraps what the descriptor
    returns), CPython's parameters, then the setup keywords."""
    stock = list(inspect.signature(subprocess.Popen).parameters.values())
    ours = list(inspect.signature(rdmaspawn.Popen).parameters.values())
    assert ours[:len(stock)] == stock
    assert [(p.name, p.kind, p.default) for p in ours[len(stock):]] == [
        (name, inspect.Parameter.KEYWORD_ONLY, default) for name, default in _SETUP_DEFAULTS.items()]


class _Bare(rdmaspawn.Popen):
    pass


def test_a_subclass_signature_is_popens() -> None:
    """A subclass without an __init__ of its own shows rdmaspawn.Popen's
    (no ``self``); one with its own, that one's."""
    assert inspect.signature(_Bare) == inspect.signature(rdmaspawn.Popen)
    assert "self" not in inspect.signature(_Bare).parameters
    assert str(inspect.signature(_Plain)) == "(*args: 'object', **kwargs: 'object') -> 'None'"


@pytest.mark.parametrize("kwargs", [{"bogus": 1}, {"pdeathsig": 9, "nice": 5}, {"stdout": -1}])
def test_an_autospec_takes_what_popen_takes(kwargs: dict) -> None:
    """create_autospec() checks calls against the signature: an unknown
    keyword raises TypeError, as for subprocess.Popen; the setup keywords
    pass."""
    stock_spec = mock.create_autospec(subprocess.Popen)
    ours_spec = mock.create_autospec(rdmaspawn.Popen)
    setup = set(kwargs) & set(_SETUP_DEFAULTS)
    if not setup:
        try:
            stock_spec(TRUE, **kwargs)
        except TypeError as stock_error:
            with pytest.raises(TypeError) as ours:
                ours_spec(TRUE, **kwargs)
            assert str(ours.value) == str(stock_error)
            return
    ours_spec(TRUE, **kwargs)
    ours_spec.assert_called_once_with(TRUE, **kwargs)
