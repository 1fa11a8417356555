"""The binding's functions written against the Python C API (csrc/python/):
builtins that keep the GIL where a cffi call would hand it over on every
spawn (csrc/python/functions.c says why).

They are the extension module ``rdmaspawn._native._capi``, whose init is in
the cffi-built library itself: it is loaded here, once, from that file. The
loader finds the file already open and returns its handle, so the two
modules share one copy of every static (the SIGINT hold, the spawn count).
"""
from __future__ import annotations

import importlib.machinery
import sys
from typing import Any, Callable

from .. import _rdmaspawn_cffi

__all__ = ["close_fd", "sigint_set_main", "sigint_owner", "sigint_held", "sigint_hold", "sigint_take", "sigint_release", "fork_exec_params", "fork_exec_new",
           "fork_exec_setup", "spawn_posix", "spawn_request_fields", "spawn_request",
           "set_spawn_error", "popen_init_new", "popen_init_method", "errpipe_calls", "held_fork"]

_NAME = "rdmaspawn._native._capi"


def _load() -> Any:
    # importlib.machinery alone: importlib.util would cost the guard's first
    # fork its imports (contextlib and more).
    loader = importlib.machinery.ExtensionFileLoader(_NAME, _rdmaspawn_cffi.__file__)
    spec = importlib.machinery.ModuleSpec(_NAME, loader, origin=loader.path)
    module = loader.create_module(spec)
    module.__spec__, module.__loader__ = spec, loader
    loader.exec_module(module)
    sys.modules[_NAME] = module
    return module


_c = _load()

#: os.close() for an fd whose close cannot block (a pidfd), keeping the GIL.
close_fd: Callable[[int], None] = _c.close_fd
#: SIGINT held back (csrc/python/sigint.c): whether a hold is on, the hold
#: (False: nothing held), the arrivals so far (taken) and the release (the
#: arrivals not taken); dropin.interrupts', per Popen.
sigint_held: Callable[[], int] = _c.sigint_held
sigint_hold: Callable[[], int] = _c.sigint_hold
sigint_take: Callable[[], int] = _c.sigint_take
sigint_release: Callable[[], int] = _c.sigint_release
#: The thread that runs Python's signal handlers, by ident, and whether the
#: calling thread is it with no hold on (dropin.interrupts' owner()).
sigint_set_main: Callable[[int], None] = _c.sigint_set_main
sigint_owner: Callable[[], bool] = _c.sigint_owner
#: The C fork_exec's parameter names, in the order fork_exec_new wants their
#: positions (the names of dropin.cpython.ForkExecCall).
fork_exec_params: Callable[[], tuple[str, ...]] = _c.fork_exec_params
#: ``fork_exec_new(wrapped, slow, positions, wording, chdir_tag, report,
#: first_memory_fd)``: csrc/python/fork_exec.c's fork_exec object.
fork_exec_new: Callable[[Any, Any, tuple[int, ...], tuple[str, ...], bytes,
                         Callable[[int, bytes], object], int],
                        Callable[..., int]] = _c.fork_exec_new
#: ``fork_exec_setup(fork_exec, args, setup_address)``: that object's call
#: without its preexec_fn, with the packed ``struct rs_setup`` at the address.
fork_exec_setup: Callable[[Any, tuple[Any, ...], int], int] = _c.fork_exec_setup
#: ``spawn_posix(args[, conversion])``: csrc/python/convert.c,
#: ``Popen._posix_spawn``'s call (its positional arguments) converted and
#: spawned as ``os.posix_spawn`` would: ``(pid, p2cread, ..., errwrite)``, or
#: its exception; ``conversion`` (``dropin.cpython.PosixSpawn.conversion``)
#: is kept for the calls without one, NotImplemented where there is none yet
#: or the call is of another count.
spawn_posix: Callable[..., Any] = _c.spawn_posix
#: SpawnRequest's field names in the order spawn_request reads them
#: (csrc/python/convert.c).
spawn_request_fields: Callable[[], tuple[str, ...]] = _c.spawn_request_fields
#: ``spawn_request(request, setup_address)``: csrc/python/convert.c, a
#: SpawnRequest converted and spawned (the packed ``struct rs_setup`` at
#: setup_address, 0: none): ``(pid, pidfd)``, or its SpawnError raised.
spawn_request: Callable[[tuple[Any, ...], int], tuple[int, int]] = _c.spawn_request
#: ``set_spawn_error(make)``: the function that makes a failed spawn's
#: exception for the C side (engine._spawn_error).
set_spawn_error: Callable[[Callable[..., BaseException]], None] = _c.set_spawn_error
#: ``popen_init_new(base, popen, prepare, layout, getsignal, raise_signal)``:
#: csrc/python/popen_init.c, the body of rdmaspawn.Popen's ``__init__``
#: (``base.__init__`` with SIGINT held back, for exact instances of ``popen``
#: given no setup keyword); ``prepare`` makes any other call's arguments.
popen_init_new: Callable[..., Any] = _c.popen_init_new
#: ``popen_init_method(body, face, setup_keywords)``: csrc/python/popen_init.c,
#: rdmaspawn.Popen's ``__init__``, a method descriptor: the plain call under
#: ``body``'s hold, any other to ``face`` (the Python function calling
#: ``body``), whose answers it gives to introspection.
popen_init_method: Callable[..., Any] = _c.popen_init_method
#: ``errpipe_calls(pipes, os, first_fd, guard_mark)``: csrc/python/errpipe.c,
#: the (pipe, read, close) of dropin.errpipe's pipes.
errpipe_calls: Callable[[dict[int, Any], Any, int, str], Any] = _c.errpipe_calls
#: ``held_fork(fork, decide, unheld)``: csrc/python/heldfork.c, ``fork()``
#: with its child held until the parent has compared their total_vm, and
#: ``decide(pid, pages_left_out)`` asked where they differ (it raises to
#: refuse); ``unheld()`` looks before an unwatched fork where the child
#: cannot be held.
held_fork: Callable[[Callable[[], Any], Callable[[int, int], object], Callable[[], object]], Any] = \
    _c.held_fork
