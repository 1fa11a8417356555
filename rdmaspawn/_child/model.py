"""The child's declarative setup: what launchers use ``preexec_fn`` for, as data.

A :class:`ChildSetup` is carried out in the CLONE_VM child with raw system
calls (``csrc/setup.c``), or called as a stock ``preexec_fn``, in one order;
the death signal last, because the kernel clears it on a credential change.
The cgroup, tty, limits and priorities come after the id change, as CPython
would run a ``preexec_fn``; Popen's keywords' (``privileged_first``) before
it, so that a limit the new user may not set still can be.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["Chain", "ChildSetup", "build", "merge", "signal_bits"]

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_SHIFT = 13
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
_RLIM_INFINITY = 0xFFFFFFFFFFFFFFFF


class ChildSetup(NamedTuple):
    """What the child does between clone and exec; every field optional (a
    NamedTuple: ``dataclasses`` would weigh on start-up under ``RDMASPAWN``).

    ``nice`` is an increment; ``ctty`` a fd, as numbered in the child, that
    becomes the controlling terminal of a new session. ``setsid`` is a new
    session unless the child leads one already (``start_new_session=True``);
    ``os_setsid`` is ``os.setsid`` itself as ``preexec_fn``, refused where
    the child leads a session or a group already, as under CPython.
    """

    setsid: bool = False
    os_setsid: bool = False
    pgid: int | None = None
    umask: int | None = None
    ignore_signals: frozenset[int] = frozenset()
    default_signals: frozenset[int] = frozenset()
    signal_mask: frozenset[int] | None = None
    cgroup: str | None = None
    ctty: int | None = None
    rlimits: tuple[tuple[int, int, int], ...] = ()
    nice: int | None = None
    ioprio: tuple[int, int] | None = None
    cpu_affinity: frozenset[int] | None = None
    no_new_privs: bool = False
    pdeathsig: int | None = None
    privileged_first: bool = False

    def has_privileged_steps(self) -> bool:
        """Whether a step whose outcome depends on the ids is set."""
        return (self.cgroup is not None or self.ctty is not None or bool(self.rlimits)
                or self.nice is not None or self.ioprio is not None
                or self.cpu_affinity is not None)

    def __call__(self) -> None:
        """Do it all with Python calls: the value as a stock ``preexec_fn``."""
        parent = os.getppid()
        if self.os_setsid:
            os.setsid()
        elif (self.setsid or self.ctty is not None) and os.getsid(0) != os.getpid():
            os.setsid()  # not twice: start_new_session=True did it already
        if self.pgid is not None:
            os.setpgid(0, self.pgid)
        if self.umask is not None:
            os.umask(self.umask)
        for sig in sorted(self.ignore_signals):
            signal.signal(sig, signal.SIG_IGN)
        for sig in sorted(self.default_signals - self.ignore_signals):
            signal.signal(sig, signal.SIG_DFL)
        if self.signal_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.signal_mask)
        if self.cgroup is not None:
            _join_cgroup(self.cgroup)
        if self.ctty is not None:
            import fcntl
            import termios

            fcntl.ioctl(self.ctty, termios.TIOCSCTTY, 0)
        if self.rlimits:
            import resource

            for res, soft, hard in self.rlimits:
                resource.setrlimit(res, (_python_rlimit(soft), _python_rlimit(hard)))
        if self.nice is not None:
            os.nice(self.nice)
        if self.ioprio is not None:
            _libc_call("syscall", _SYS_IOPRIO_SET[os.uname().machine],
                       _IOPRIO_WHO_PROCESS, 0, ioprio_value(self.ioprio))
        if self.cpu_affinity is not None:
            os.sched_setaffinity(0, self.cpu_affinity)
        if self.no_new_privs:
            _libc_call("prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if self.pdeathsig is not None:
            _libc_call("prctl", _PR_SET_PDEATHSIG, int(self.pdeathsig), 0, 0, 0)
            if os.getppid() != parent:
                # Reparented before the prctl: nobody will send it now.
                os.kill(os.getpid(), self.pdeathsig)


class Chain(tuple):  # type: ignore[type-arg]
    """Several ``preexec_fn`` values, called in order (``rdmaspawn.preexec.chain``)."""

    def __call__(self) -> None:
        for fn in self:
            fn()


def _join_cgroup(path: str) -> None:
    # As the engine's parent opens them (_setup_pack): the directory, then
    # its cgroup.procs without O_CREAT, so that "" or a directory that is
    # no cgroup fails with FileNotFoundError instead of creating the file.
    directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        procs = os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=directory)
    finally:
        os.close(directory)
    try:
        os.write(procs, b"0")
    finally:
        os.close(procs)


def _python_rlimit(value: int) -> int:
    # The packed form keeps RLIM_INFINITY as all ones (prlimit64's); the
    # resource module spells it -1 and rejects the unsigned value.
    return -1 if value == _RLIM_INFINITY else value


def _libc_call(name: str, *args: int) -> None:
    import ctypes  # only in a forked child, under stock CPython

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*[ctypes.c_long(a) for a in args]) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def ioprio_value(ioprio: tuple[int, int]) -> int:
    """``(class, level)`` as ioprio_set(2) takes it."""
    klass, level = ioprio
    return (klass << _IOPRIO_CLASS_SHIFT) | level


def merge(first: ChildSetup, second: ChildSetup) -> ChildSetup:
    """Both setups, ``second`` winning where both set the same thing."""
    changes: dict[str, Any] = {name: getattr(second, name) for name, default
                               in ChildSetup._field_defaults.items()
                               if getattr(second, name) != default}
    if first.rlimits and second.rlimits:
        mine = {res: (res, soft, hard) for res, soft, hard in first.rlimits}
        mine.update({res: (res, soft, hard) for res, soft, hard in second.rlimits})
        changes["rlimits"] = tuple(mine.values())
    changes["ignore_signals"] = (first.ignore_signals - second.default_signals
                                 | second.ignore_signals)
    changes["default_signals"] = (first.default_signals - second.ignore_signals
                                  | second.default_signals)
    # One order for the privileged steps: that of the setup that has them
    # (the keywords' when both have: a known limit, see docs/preexec.md).
    changes["privileged_first"] = (
        first.privileged_first and (first.has_privileged_steps()
                                    or not second.has_privileged_steps())
        or second.privileged_first and second.has_privileged_steps())
    return first._replace(**changes)


def signal_bits(signals: Iterable[int]) -> int:
    """A set of signals as the kernel's mask: bit (sig - 1) for sig."""
    bits = 0
    for sig in signals:
        sig = int(sig)
        if not 1 <= sig <= 64:
            raise ValueError(f"signal number out of range: {sig}")
        bits |= 1 << (sig - 1)
    return bits


def rlimit_value(value: int) -> int:
    """A limit as prlimit64 takes it: RLIM_INFINITY (-1) as all ones."""
    if value == -1 or value == _RLIM_INFINITY:
        return _RLIM_INFINITY
    if value < 0 or value > _RLIM_INFINITY:
        raise ValueError(f"rlimit out of range: {value}")
    return value


def build(
    *,
    setsid: bool = False,
    os_setsid: bool = False,
    pgid: int | None = None,
    umask: int | None = None,
    pdeathsig: int | None = None,
    rlimits: Mapping[int, tuple[int, int]] | Iterable[tuple[int, tuple[int, int]]] | None = None,
    nice: int | None = None,
    ioprio: tuple[int, int] | None = None,
    cpu_affinity: Iterable[int] | None = None,
    no_new_privs: bool = False,
    ignore_signals: Iterable[int] = (),
    default_signals: Iterable[int] = (),
    signal_mask: Iterable[int] | None = None,
    cgroup: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None = None,
    ctty: int | None = None,
    privileged_first: bool = False,
) -> ChildSetup:
    """A checked :class:`ChildSetup`: bad values fail here, in the parent.

    ``rlimits`` is a mapping ``{resource: (soft, hard)}`` or pairs of that;
    a limit of -1 is RLIM_INFINITY.
    """
    limits: list[tuple[int, int, int]] = []
    items = rlimits.items() if isinstance(rlimits, Mapping) else (rlimits or ())
    for res, pair in items:
        soft, hard = pair
        limits.append((_int(res, "rlimit resource", 0, 63), rlimit_value(_int(soft, "rlimit")),
                       rlimit_value(_int(hard, "rlimit"))))
    cpus = None
    if cpu_affinity is not None:
        cpus = frozenset(_int(cpu, "cpu", 0, 1 << 20) for cpu in cpu_affinity)
        if not cpus:
            raise ValueError("cpu_affinity must name at least one CPU")
    if ioprio is not None:
        klass, level = ioprio
        ioprio = (_int(klass, "ioprio class", 0, 7), _int(level, "ioprio level", 0, 7))
    return ChildSetup(
        setsid=bool(setsid),
        os_setsid=bool(os_setsid),
        pgid=None if pgid is None else _int(pgid, "pgid", 0, 0x7FFFFFFF),
        umask=None if umask is None else _int(umask, "umask", 0, 0o7777),
        ignore_signals=_signals(ignore_signals),
        default_signals=_signals(default_signals),
        signal_mask=None if signal_mask is None else _signals(signal_mask),
        cgroup=None if cgroup is None else os.fsdecode(os.fspath(cgroup)),
        ctty=None if ctty is None else _int(ctty, "ctty", 0, 0x7FFFFFFF),
        rlimits=tuple(limits),
        nice=None if nice is None else _int(nice, "nice", -40, 40),
        ioprio=ioprio,
        cpu_affinity=cpus,
        no_new_privs=bool(no_new_privs),
        pdeathsig=None if pdeathsig is None else _int(pdeathsig, "signal", 1, 64),
        privileged_first=bool(privileged_first),
    )


def _int(value: Any, what: str, low: int = -(1 << 63), high: int = 1 << 64) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{what} out of range: {value}")
    return int(value)


def _signals(signals: Iterable[int]) -> frozenset[int]:
    if isinstance(signals, int):
        signals = (signals,)
    return frozenset(_int(sig, "signal", 1, 64) for sig in signals)
