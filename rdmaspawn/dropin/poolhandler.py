"""multiprocessing.Pool: a worker that cannot be started fails the job instead of hanging it.

If starting a worker raises (``guard("raise")``, ``EAGAIN``), CPython's
worker-handler thread dies and every ``map()``/``get()`` waits forever; with
:func:`install` every waiting result raises it and the pool is closed.
"""
from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

from .._startup.onimport import when_imported

__all__ = ["install", "install_when_imported"]

_MARK = "__rdmaspawn_poolhandler__"
_lock = threading.Lock()
# Every Pool made since install(), to find the one whose worker list failed.
_pools: weakref.WeakSet[Any] = weakref.WeakSet()
# install_when_imported() was called: install() runs (or ran) with the import.
_requested = False


def _fail_waiting(cache: Any, exc: BaseException) -> None:
    from multiprocessing.pool import ApplyResult, MapResult

    result: Any
    for job, result in list(cache.items()):
        kind = MapResult if isinstance(result, MapResult) else (
            ApplyResult if isinstance(result, ApplyResult) else None)
        try:
            if kind is MapResult:
                while job in cache:  # one failure per chunk still outstanding
                    result._set(0, (False, exc))
            elif kind is ApplyResult:
                result._set(0, (False, exc))
            else:  # IMapIterator, IMapUnorderedIterator: the consumer's next() raises
                result._set(result._index, (False, exc))
                cache.pop(job, None)
        except KeyError:
            pass  # the result handler delivered the last piece meanwhile


def install() -> None:
    """Wrap ``Pool.__init__`` and ``Pool._maintain_pool`` (idempotent; pools made afterwards)."""
    from multiprocessing.pool import Pool

    with _lock:
        if getattr(Pool.__init__, _MARK, False):
            return
        init = Pool.__init__
        maintain = Pool._maintain_pool  # type: ignore[attr-defined]

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            _pools.add(self)
            init(self, *args, **kwargs)

        @functools.wraps(maintain)
        def _maintain_pool(ctx: Any, Process: Any, processes: Any, pool: Any,
                           *rest: Any) -> Any:
            try:
                return maintain(ctx, Process, processes, pool, *rest)
            except Exception as exc:
                owner = next((p for p in list(_pools) if getattr(p, "_pool", None) is pool),
                             None)
                if owner is None:
                    raise
                owner.close()  # first, so that nothing new starts waiting
                _fail_waiting(owner._cache, exc)
                return None

        setattr(__init__, _MARK, True)
        Pool.__init__ = __init__  # type: ignore[method-assign]
        Pool._maintain_pool = staticmethod(_maintain_pool)  # type: ignore[attr-defined]


def install_when_imported() -> None:
    """:func:`install` now if multiprocessing.pool is imported, else when it
    is (importing it here would cost every guarded process multiprocessing's
import, docs/benchmark.md)."""
    global _requested
    with _lock:
        if _requested:
            return
        _requested = True
    when_imported("multiprocessing.pool", lambda _: install())
