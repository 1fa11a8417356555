"""The binding's functions written against the Python C API (csrc/python/).

cffi releases the GIL for every call it makes, even one that only sets a
variable; with several threads spawning, each release is a hand-over of the
GIL (a futex wake, a context switch), and on rdmaspawn.Popen's hot path
those cost throughput. So what Popen calls per spawn is plain builtins made
by csrc/python/functions.c: the C ``fork_exec``, a close that keeps the GIL,
the SIGINT hold, the copy of the environ array for ``env=None``, the plain
call of ``Popen._posix_spawn``, the engine's plain request, Popen's ``__init__``. They are fetched once
through ctypes.PyDLL (which holds the GIL and passes Python objects, as cffi
cannot).

Where ctypes cannot load the module (a process that dropped the privileges
to read its own install, say), each falls back: the SIGINT hold to the
same C functions through cffi, ``close_fd`` to ``os.close``,
``fork_exec_new`` to None (dropin's fork_exec then runs in Python),
``environ_snapshot`` to None (the engine then copies the array from Python),
``spawn_posix_plain`` to None (dropin.posixspawn's plain call then runs
in Python), ``spawn_request_plain`` to None (the engine converts every request
in Python), ``popen_init_new`` to None (Popen's ``__init__`` stays the
Python one), and ``errpipe_calls`` to None (Popen's error pipe stays a real
one).
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

from .._rdmaspawn_cffi import lib

__all__ = ["pydll", "close_fd", "sigint_set_main", "sigint_owner", "sigint_held", "sigint_hold", "sigint_take", "sigint_release", "environ_snapshot", "fork_exec_params", "fork_exec_new",
           "spawn_posix_plain", "spawn_request_fields", "spawn_request_plain", "popen_init_new", "errpipe_calls", "held_fork"]


@functools.cache
def pydll() -> Any:
    """The extension as a ctypes.PyDLL (calls hold the GIL), or None; opened once."""
    from .. import _rdmaspawn_cffi

    try:
        import ctypes

        return ctypes.PyDLL(_rdmaspawn_cffi.__file__)
    except (ImportError, OSError):
        return None


def _load() -> dict[str, Any]:
    dll = pydll()
    try:
        get = dll.rs_python_functions
    except AttributeError:  # no dll, or a build without csrc/python/
        return {}
    import ctypes

    get.restype = ctypes.py_object
    get.argtypes = []
    return get()  # type: ignore[no-any-return]


_functions = _load()


#: os.close() for an fd whose close cannot block (a pidfd), keeping the GIL.
close_fd: Callable[[int], None] = _functions.get("close_fd", os.close)
#: SIGINT held back (csrc/python/sigint.c): whether a hold is on, the hold
#: (False: nothing held), the arrivals so far (taken) and the release (the
#: arrivals not taken); dropin.interrupts', per Popen.
sigint_held: Callable[[], int] = _functions.get("sigint_held", lib.rs_sigint_held)
sigint_hold: Callable[[], int] = _functions.get("sigint_hold", lib.rs_sigint_hold)
sigint_take: Callable[[], int] = _functions.get("sigint_take", lib.rs_sigint_take)
sigint_release: Callable[[], int] = _functions.get("sigint_release", lib.rs_sigint_release)
#: The thread that runs Python's signal handlers, by ident, and whether the
#: calling thread is it with no hold on (dropin.interrupts' owner()); None
#: without ctypes (interrupts then asks in Python).
sigint_set_main: Callable[[int], None] | None = _functions.get("sigint_set_main")
sigint_owner: Callable[[], bool] | None = _functions.get("sigint_owner")
#: A copy of the C environ array (its pointers and a NULL, as bytes), taken
#: with the GIL held (csrc/python/environ.c); None without ctypes.
environ_snapshot: Callable[[], bytes] | None = _functions.get("environ_snapshot")
#: The C fork_exec's parameter names, in the order fork_exec_new wants their
#: positions (the names of dropin.cpython.ForkExecCall); None without ctypes.
fork_exec_params: Callable[[], tuple[str, ...]] | None = _functions.get("fork_exec_params")
#: ``fork_exec_new(wrapped, slow, positions, chdir_tag, report,
#: first_memory_fd)``: csrc/python/fork_exec.c's fork_exec object; None
#: without ctypes.
fork_exec_new: Callable[[Any, Any, tuple[int, ...], bytes, Callable[[int, bytes], object], int],
                        Callable[..., int]] | None = _functions.get("fork_exec_new")
#: ``spawn_posix_plain(args, positions)``: csrc/python/posix_spawn.c,
#: ``Popen._posix_spawn``'s plain call (its positional arguments) spawned: the
#: pid, or None where the call is not plain; ``positions`` says where each
#: parameter sits (dropin.posixspawn makes it). None without ctypes.
spawn_posix_plain: Callable[[tuple[Any, ...], bytes], int | None] | None = \
    _functions.get("spawn_posix_plain")
#: SpawnRequest's field names in the order spawn_request_plain reads them
#: (csrc/python/spawn_request.c); None without ctypes.
spawn_request_fields: Callable[[], tuple[str, ...]] | None = _functions.get("spawn_request_fields")
#: ``spawn_request_plain(request)``: csrc/python/spawn_request.c, a
#: SpawnRequest without setup spawned: ``(pid, pidfd, err, step,
#: exec_index)``, or None where it is not plain. None without ctypes.
spawn_request_plain: Callable[[tuple[Any, ...]], tuple[int, int, int, int, int] | None] | None = \
    _functions.get("spawn_request_plain")
#: ``popen_init_new(base, popen, slow, setup_keywords, getsignal,
#: raise_signal)``: csrc/python/popen_init.c, rdmaspawn.Popen's ``__init__``
#: (``base.__init__`` with SIGINT held back, for instances of ``popen``) as a
#: method descriptor; any call it does not take goes to ``slow``, the Python
#: one. None without ctypes (Popen keeps the Python one).
popen_init_new: Callable[..., Any] | None = _functions.get("popen_init_new")
#: ``errpipe_calls(pipes, os, first_fd, guard_mark)``: csrc/python/errpipe.c,
#: the (pipe, read, close) of dropin.errpipe's pipes; None without ctypes
#: (CPython's real error pipe is made then).
errpipe_calls: Callable[[dict[int, Any], Any, int, str], Any] | None = \
    _functions.get("errpipe_calls")
#: ``held_fork(fork, decide, unheld)``: csrc/python/heldfork.c, ``fork()``
#: with its child held until the parent has compared their total_vm, and
#: ``decide(pid, pages_left_out)`` asked where they differ (it raises to
#: refuse); ``unheld()`` looks before an unwatched fork where the child
#: cannot be held; None without ctypes.
held_fork: Callable[[Callable[[], Any], Callable[[int, int], object], Callable[[], object]], Any] \
    | None = \
    _functions.get("held_fork")
