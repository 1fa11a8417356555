"""Run a function when a module has been imported: now if it is already, else right after.

The start-up hook adjusts multiprocessing (its default start method, Pool's
worker handler), which most processes never import; importing it at start-up
would cost every interpreter in a job ~15 ms. :func:`when_imported` defers the
adjustment to the import itself: a finder first on ``sys.meta_path`` asks the
other finders for the module's spec and wraps its loader so that the
function runs once the module's code has run, before the importer sees it.
The wrapper hands every other attribute (``get_source``, ``get_data``, ...)
to the real loader.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable

__all__ = ["when_imported"]

_lock = threading.Lock()
_pending: dict[str, list[Callable[[ModuleType], None]]] = {}


class _CallingLoader:
    """A module's real loader, plus the functions waiting for that module."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._loader, attr)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        with _lock:
            waiting = _pending.pop(self._name, [])
            if not _pending and _finder in sys.meta_path:
                sys.meta_path.remove(_finder)
        for fn in waiting:
            fn(module)


class _Finder:
    """First on sys.meta_path while some function waits; silent for every other name."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in _pending:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CallingLoader(spec.loader, name)  # type: ignore[assignment]
                return spec
        return None


_finder = _Finder()


def when_imported(name: str, fn: Callable[[ModuleType], None]) -> bool:
    """Call ``fn(module)`` now if ``name`` is imported (returns True), else after its import."""
    module = sys.modules.get(name)
    if module is not None:
        fn(module)
        return True
    with _lock:
        _pending.setdefault(name, []).append(fn)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    return False
