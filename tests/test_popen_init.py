"""rdmaspawn.Popen.__init__ and _wait as CPython's callers and subclasses
meet them: the C __init__ (csrc/python/popen_init.c) takes rdmaspawn.Popen's
own plain calls, and anything else reaches the Python one, whose super()
finds whatever the MRO puts between rdmaspawn.Popen and CPython's Popen."""
from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import rdmaspawn
from rdmaspawn.dropin import popen

TRUE = [sys.executable, "-c", "pass"]


def test_the_c_init_is_in_force() -> None:
    init = rdmaspawn.Popen.__dict__["__init__"]
    assert init is not popen._init_python
    assert (init.__name__, init.__qualname__) == ("__init__", "Popen.__init__")
    assert init.__wrapped__ is popen._init_python
    with_python_init = type("P", (), {"__init__": popen._init_python})
    assert inspect.signature(rdmaspawn.Popen) == inspect.signature(with_python_init)


def test_unwrapping_a_bound_init_keeps_the_binding() -> None:
    """inspect.unwrap() stops at the C __init__ bound to the class or to an
    instance, as at a function's: CPython 3.13.5's inspect.signature(cls)
    unwraps the bound __init__ that the descriptor returns (gh-119605; 3.13.0
    does not), and following __wrapped__ from there reached the plain Python
    __init__: (self, *args, **kwargs) (issue 48, item 4)."""
    init = rdmaspawn.Popen.__dict__["__init__"]
    instance = rdmaspawn.Popen.__new__(rdmaspawn.Popen)
    stop = lambda m: hasattr(m, "__signature__")  # noqa: E731  # 3.13.5's
    for bound in (init.__get__(rdmaspawn.Popen, type), init.__get__(instance, rdmaspawn.Popen)):
        assert inspect.signature(inspect.unwrap(bound, stop=stop)) == inspect.signature(bound)
        assert "self" not in inspect.signature(inspect.unwrap(bound, stop=stop)).parameters
    assert init.__signature__ == inspect.signature(popen._init_python)


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
