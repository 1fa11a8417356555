"""One long-lived thread that starts the children that ask for a death signal:
the kernel sends it when the *thread* that created the child exits (prctl(2))."""
from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable

__all__ = ["run_as_process"]

_Job = tuple[Callable[[], Any], list[Any], threading.Event]

_lock = threading.Lock()
_jobs: queue.SimpleQueue[_Job] | None = None
_owner_pid = -1


def _serve(jobs: queue.SimpleQueue[_Job]) -> None:
    while True:
        call, box, done = jobs.get()
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed back to the caller as is
            box.append((False, exc))
        finally:
            done.set()


def _queue() -> queue.SimpleQueue[_Job]:
    global _jobs, _owner_pid
    with _lock:
        if _jobs is None or _owner_pid != os.getpid():
            # First use, or a fork()ed child, where the thread did not follow.
            _jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(_jobs,), daemon=True,
                             name="rdmaspawn-spawner").start()
            _owner_pid = os.getpid()
        return _jobs


def run_as_process(call: Callable[[], Any], undo: Callable[[Any], None]) -> Any:
    """``call()``, run where a death signal follows the process (the main
    thread, or the spawner thread); ``undo(result)`` disposes of a child
    whose caller was interrupted while waiting."""
    if threading.current_thread() is threading.main_thread():
        return call()
    box: list[Any] = []
    done = threading.Event()
    _queue().put((call, box, done))
    try:
        done.wait()
    except BaseException:
        done.wait()
        if box and box[0][0]:
            undo(box[0][1])
        raise
    ok, value = box[0]
    if not ok:
        raise value
    return value
