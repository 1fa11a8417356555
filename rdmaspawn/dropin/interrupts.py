"""Hold SIGINT's Python handler back while ``rdmaspawn.Popen`` starts a child.

A KeyboardInterrupt can be raised at almost any bytecode of the main thread.
Raised between the engine's return and ``self.pid = ...``, it loses the pid:
a child nobody can reap; raised between ``_get_handles()`` and the wrapping
of the pipes in file objects, it loses fds. (CPython's own Popen has the
same windows; rdmaspawn's is wider: the calling thread waits in the engine
until the child has exec'd, and a SIGINT that arrives meanwhile runs its
handler just after.)

So while a Popen is being built, SIGINT's handler only counts. When the
Popen is complete the real handler runs once for what arrived (POSIX merges
pending signals the same way); if it raises, the caller never gets the Popen,
so its child is killed and reaped and its pipes closed (``Popen._discard``)
before the exception goes on. Only the main thread runs signal handlers, and
only a Python-level handler can raise: elsewhere nothing is held.

The hold leaves SIGINT as the program set it. Swapping a Python handler
goes through sigaction() with Python's own flags (SA_ONSTACK, no
SA_RESTART, an empty mask), so the kernel's whole ``struct sigaction`` is
kept beside the handler and put back with it. A handler the program installs
meanwhile (from another signal's handler, or from code Popen() runs) wins:
each swap is a compare-and-swap on the value ``signal.signal()`` returns,
since that call itself runs pending handlers before it swaps. (Blocking
SIGINT instead would hold nothing in a process with other threads: the
kernel hands the signal to one that does not block it, and the main thread
runs the Python handler all the same.)

Not covered: other signals whose Python handler raises (a SIGALRM timeout,
a SIGTERM handler raising SystemExit).
"""
from __future__ import annotations

import _signal  # signal's C half: the same calls without the enum conversions
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable

__all__ = ["Held", "hold"]

# On the hot path (every Popen in the main thread): a plain int, no enum.
_SIGINT = int(signal.SIGINT)


class _KernelAction:
    """SIGINT's ``struct sigaction`` as the kernel holds it, saved and put
    back whole (opaque bytes: no layout is assumed). Put back only where it
    differs from what Python's own signal() installs (learned once):
    SA_RESTART from ``siginterrupt()``, or a handler a C library installed
    under the Python one.

    Read and written by the binding's builtins (csrc/python/functions.c), a
    system call each; through ctypes, where those are missing, the same
    calls cost the parent some 20 us per Popen."""

    def __init__(self) -> None:
        from .._native import capi

        read, write = capi.sigint_action, capi.set_sigint_action
        if read is None or write is None:
            read, write = _ctypes_sigaction()
        self.save: Callable[[], bytes | None] = read
        self._write: Callable[[bytes], None] = write
        self._python_own: bytes | None = None

    def restore(self, saved: bytes | None) -> None:
        """Just after Python's signal() put the handler back: its flags are
        Python's; make them ``saved``'s."""
        if self._python_own is None:
            self._python_own = self.save()
        if saved is not None and saved != self._python_own:
            self._write(saved)


def _ctypes_sigaction() -> tuple[Callable[[], bytes | None], Callable[[bytes], None]]:
    """sigaction(SIGINT) read and written through ctypes (loaded already:
    rdmaspawn._native.capi uses it), for a binding without the builtins."""
    import ctypes

    sigaction = ctypes.CDLL(None, use_errno=True).sigaction
    struct = ctypes.c_char * 512  # glibc's is 152 bytes on x86-64 and aarch64

    def read() -> bytes | None:
        saved = struct()
        return saved.raw if sigaction(_SIGINT, None, saved) == 0 else None

    def write(saved: bytes) -> None:
        sigaction(_SIGINT, struct.from_buffer_copy(saved), None)

    return read, write


_kernel: _KernelAction | None = None


def _kernel_action() -> _KernelAction | None:
    global _kernel
    if _kernel is None:
        try:
            _kernel = _KernelAction()
        except (ImportError, OSError, AttributeError):  # no ctypes: the flags are not kept
            return None
    return _kernel


def _swap(expected: Any, new: Any) -> bool:
    """Make ``new`` SIGINT's Python handler if ``expected`` is; True if it now is.

    ``signal.signal()`` runs pending handlers before it swaps, so one of
    them may have installed a handler of its own: that one is put back, and
    stays (the program's latest word)."""
    want, put = expected, new
    while _signal.getsignal(_SIGINT) is want:
        was = _signal.signal(_SIGINT, put)
        if was is want:
            return put is new
        want, put = put, was
    return False


class Held:
    """SIGINT held back in the main thread until :meth:`release`."""

    def __init__(self, handler: Callable[[int, FrameType | None], Any], kernel: Any) -> None:
        self.handler = handler
        self.arrived = 0
        self.handled = 0
        self._kernel = kernel  # the saved struct sigaction (None: not kept)
        self.recorder = self._record  # one bound method: compared by identity

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.arrived += 1

    def replay(self) -> None:
        """Run the real handler, once, for the SIGINTs that arrived so far
        (more keep waiting). It may raise: that is the point."""
        if self.arrived > self.handled:
            self.handled = self.arrived
            self.handler(signal.SIGINT, sys._getframe(1))

    def release(self) -> None:
        """Give SIGINT its handler and flags back, unless the program set
        another meanwhile; one that arrived after the last :meth:`replay` is
        raised again, for that handler."""
        if _swap(self.recorder, self.handler):
            kernel = _kernel_action()
            if kernel is not None:
                kernel.restore(self._kernel)
                # A handler that ran just before the restore and changed
                # SIGINT: make the kernel's side match its choice again.
                while _signal.getsignal(_SIGINT) is not self.handler:
                    now = _signal.getsignal(_SIGINT)
                    if _signal.signal(_SIGINT, now) is now:
                        break
        if self.arrived > self.handled:
            _signal.raise_signal(_SIGINT)


def hold() -> Held | None:
    """Start holding SIGINT back, or None where its handler cannot run here."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = _signal.getsignal(_SIGINT)
    if not callable(handler):
        return None  # SIG_IGN, SIG_DFL, or not installed from Python
    kernel = _kernel_action()
    held = Held(handler, None if kernel is None else kernel.save())
    try:
        if not _swap(handler, held.recorder):
            return None  # a pending handler changed SIGINT just now: nothing held
    except ValueError:  # a subinterpreter: no signal handlers of its own
        return None
    return held
