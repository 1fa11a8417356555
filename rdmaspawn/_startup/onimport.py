"""Run a function when a module has been imported: now if it is already, else right after.

Start-up adjusts multiprocessing, which most processes never import: a finder
first on ``sys.meta_path`` wraps the real loader to run the function once the
module's code has run. Imports nothing the interpreter has not loaded already
(``threading`` or ``typing`` would cost every one).
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.
import _thread
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Callable

__all__ = ["after_subprocess", "when_imported"]

_lock = _thread.allocate_lock()
# name -> [(fn, at_once)]: what waits for that module.
_pending: "dict[str, list[tuple[Callable[[ModuleType], None], bool]]]" = {}
_PACKAGE = __name__.split(".")[0] + "."
# Per thread: the calls that came due while one of the package's own modules
# was loading (None when none is), made once the outermost has loaded.
_loading = _thread._local()


def _call(fn: "Callable[[ModuleType], None]", module: "ModuleType", at_once: bool = False) -> None:
    due: "list[tuple[Callable[[ModuleType], None], ModuleType]] | None" = getattr(  # noqa: UP037
        _loading, "due", None)
    if due is None or at_once:
        fn(module)
    else:
        due.append((fn, module))


class _CallingLoader:
    """A module's real loader, plus the functions waiting for that module."""

    def __init__(self, loader: "Any", name: str) -> None:
        self._loader = loader
        self._name = name

    def __getattr__(self, attr: str) -> "Any":
        return getattr(self._loader, attr)

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: "ModuleType") -> None:
        self._loader.exec_module(module)
        with _lock:
            waiting = _pending.pop(self._name, [])
            if not _pending and _finder in sys.meta_path:
                sys.meta_path.remove(_finder)
        for fn, at_once in waiting:
            _call(fn, module, at_once)


class _OwnLoader(_CallingLoader):
    """One of this package's modules: the calls due while it loads wait for its end."""

    def exec_module(self, module: "ModuleType") -> None:
        if getattr(_loading, "due", None) is not None:  # inside another of ours
            self._loader.exec_module(module)
            return
        _loading.due = []
        try:
            self._loader.exec_module(module)
        finally:
            due, _loading.due = _loading.due, None
            for fn, awaited in due:
                fn(awaited)


class _Finder:
    """First on sys.meta_path while some function waits; silent for every other name."""

    def find_spec(self, name: str, path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if name in _pending:
            wrap: type[_CallingLoader] = _CallingLoader
        elif name.startswith(_PACKAGE):
            wrap = _OwnLoader
        else:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: "ModuleSpec | None" = find(name, path, target)  # noqa: UP037
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = wrap(spec.loader, name)  # type: ignore[assignment]
                return spec
        return None


_finder = _Finder()


def when_imported(name: str, fn: "Callable[[ModuleType], None]", at_once: bool = False) -> bool:
    """Call ``fn(module)`` now if ``name`` is imported (returns True), else after its import.

    ``at_once``: ``fn`` imports none of this package's modules, so it runs
    inside the module's import even where one of ours is its importer (the
    others wait for that one to finish; another thread may see the module
    meanwhile)."""
    module = sys.modules.get(name)
    if module is not None:
        _call(fn, module, at_once)
        return True
    with _lock:
        _pending.setdefault(name, []).append((fn, at_once))
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
    return False


def _bring_subprocess(_: "ModuleType") -> None:
    # A bare `import _posixsubprocess` (multiprocessing's spawnv_passfds on
    # 3.9-3.10) could reach fork_exec before anything waiting for subprocess
    # ran: import subprocess now, unless that is what is importing it.
    if "subprocess" not in sys.modules:
        import subprocess  # noqa: F401


def after_subprocess(fn: "Callable[[ModuleType], None]", at_once: bool = False) -> bool:
    """``fn(subprocess)`` now if subprocess is imported (returns True), else
    right after its import, which a first ``import _posixsubprocess`` brings
    about too: before any of the standard library's fork_exec can run.
    ``at_once`` as for :func:`when_imported`."""
    if "_posixsubprocess" in sys.modules:
        _bring_subprocess(sys.modules["_posixsubprocess"])
    if when_imported("subprocess", fn, at_once):
        return True
    with _lock:
        waiting = (_bring_subprocess, True) in _pending.get("_posixsubprocess", [])
    if not waiting:
        # subprocess is the standard library's: no module of ours is needed to import it.
        when_imported("_posixsubprocess", _bring_subprocess, at_once=True)
    return False
