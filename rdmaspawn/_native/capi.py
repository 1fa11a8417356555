"""csrc/python/'s builtins (they keep the GIL, csrc/python/functions.c says
why), loaded from the cffi-built file itself, so that both share its statics."""
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
#: SIGINT held back (csrc/python/sigint.c), for dropin.interrupts.
sigint_held: Callable[[], int] = _c.sigint_held
sigint_hold: Callable[[], int] = _c.sigint_hold
sigint_take: Callable[[], int] = _c.sigint_take
sigint_release: Callable[[], int] = _c.sigint_release
sigint_set_main: Callable[[int], None] = _c.sigint_set_main
sigint_owner: Callable[[], bool] = _c.sigint_owner
#: csrc/python/fork_exec.c: its parameter names, in the order of the positions
#: fork_exec_new(wrapped, slow, positions, wording, chdir_tag, report,
#: first_memory_fd) wants; fork_exec_setup(fork_exec, args, then) is that
#: object's call without its preexec_fn, converted, then spawned by
#: then(spawn), which packs the struct rs_setup (pack.then).
fork_exec_params: Callable[[], tuple[str, ...]] = _c.fork_exec_params
fork_exec_new: Callable[[Any, Any, tuple[int, ...], tuple[str, ...], bytes,
                         Callable[[int, bytes], object], int],
                        Callable[..., int]] = _c.fork_exec_new
fork_exec_setup: Callable[[Any, tuple[Any, ...], Callable[[Callable[[int], int]], int]],
                          int] = _c.fork_exec_setup
#: ``spawn_posix(args[, conversion])``: ``Popen._posix_spawn``'s positional call
#: spawned as ``os.posix_spawn`` would: ``(pid, p2cread, ..., errwrite)``;
#: ``conversion`` (``PosixSpawn.conversion``) is kept for the calls without
#: one (NotImplemented: none yet, or a call of another count).
spawn_posix: Callable[..., Any] = _c.spawn_posix
#: csrc/python/convert.c: SpawnRequest's field names in the order it reads
#: them; spawn_request(request, then) spawns it as fork_exec_setup does (then
#: None: at once); set_spawn_error(make) is how a failure's exception is made.
spawn_request_fields: Callable[[], tuple[str, ...]] = _c.spawn_request_fields
spawn_request: Callable[[tuple[Any, ...],
                         Callable[[Callable[[int], tuple[int, int]]], tuple[int, int]] | None],
                        tuple[int, int]] = _c.spawn_request
set_spawn_error: Callable[[Callable[..., BaseException]], None] = _c.set_spawn_error
#: csrc/python/popen_init.c: rdmaspawn.Popen.__init__'s body, and the method
#: (dropin/popen.py).
popen_init_new: Callable[..., Any] = _c.popen_init_new
popen_init_method: Callable[..., Any] = _c.popen_init_method
#: csrc/python/errpipe.c: the (pipe, read, close) of dropin.errpipe's pipes.
errpipe_calls: Callable[[dict[int, Any], Any, int, str], Any] = _c.errpipe_calls
#: csrc/python/heldfork.c: fork() with its child held while decide(pid,
#: pages_left_out) may refuse.
held_fork: Callable[[Callable[[], Any], Callable[[int, int], object], Callable[[], object]], Any] = \
    _c.held_fork
