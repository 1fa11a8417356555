"""Everything rdmaspawn knows about CPython's private subprocess internals.

One table by version (``TABLE``), and the facts no version number tells,
looked up in the running CPython; read only through a gate, :func:`require`
or :func:`errpipe_calls`: routing 22 arguments by the positions of 23 would
start the wrong child, silently. What does not match is refused
(:class:`UnsupportedPython`), or left to CPython where its own is safe.

One module, as long as it is, because its job is one table and its gate:
the lookups fill the table's rows and the gate checks each row against the
others (the call's loads against fork_exec's parameters and home), so split
by fact, each part would read the others' rows before the gate had passed.
"""
from __future__ import annotations

import _posixsubprocess
import dis
import io
import os
import subprocess
import sys
import sysconfig
from typing import Any, Callable, NamedTuple

from .._startup.standin import FORK_EXEC_HOMES
from .wrapping import innermost

__all__ = [
    "FORK_EXEC_HOMES",
    "POSIX_SPAWN_FLAG",
    "POSIX_SPAWN_PATH_NUL",
    "VFORK_FLAG",
    "ForkExecCall",
    "Internals",
    "PosixSpawn",
    "UnsupportedPython",
    "current",
    "errpipe_calls",
    "fork_exec_forks",
    "fork_exec_places",
    "fork_exec_positions",
    "require",
    "unpack_fork_exec",
    "use_vfork_flag",
]

#: fork_exec's allow_vfork (3.10.5-3.13) and the posix_spawn shortcut's switch.
VFORK_FLAG = "_USE_VFORK"
POSIX_SPAWN_FLAG = "_USE_POSIX_SPAWN"


class UnsupportedPython(RuntimeError):
    """This CPython's subprocess internals are not the ones rdmaspawn knows."""


class ForkExecCall(NamedTuple):
    """One ``fork_exec`` call by name; a field this version lacks is neutral (_NEUTRAL)."""

    args: Any
    executable_list: Any
    close_fds: Any
    fds_to_keep: Any
    cwd: Any
    env_list: Any
    p2cread: Any
    p2cwrite: Any
    c2pread: Any
    c2pwrite: Any
    errread: Any
    errwrite: Any
    errpipe_read: Any
    errpipe_write: Any
    restore_signals: Any
    call_setsid: Any
    pgid_to_set: Any
    gid: Any
    extra_groups: Any
    uid: Any
    child_umask: Any
    preexec_fn: Any
    allow_vfork: Any


_NEUTRAL = {"pgid_to_set": -1, "allow_vfork": True}

# fork_exec's parameters, in order (Modules/_posixsubprocess.c).
_PARAMS_21 = tuple(f for f in ForkExecCall._fields if f not in _NEUTRAL)
_PARAMS_23 = ForkExecCall._fields
# 3.14 dropped allow_vfork (and subprocess._USE_VFORK with it).
_PARAMS_22 = _PARAMS_23[:-1]

# The names _execute_child loads to make the call, in order, as its bytecode
# shows them: the check that this CPython calls fork_exec as we think.
_CALLER_21 = (
    "args", "executable_list", "close_fds", "tuple", "sorted", "map", "int", "fds_to_keep",
    "cwd", "env_list", "p2cread", "p2cwrite", "c2pread", "c2pwrite", "errread", "errwrite",
    "errpipe_read", "errpipe_write", "restore_signals", "start_new_session",
    "gid", "gids", "uid", "umask", "preexec_fn",
)
_CALLER_23 = (
    _CALLER_21[:20] + ("process_group",) + _CALLER_21[20:] + (VFORK_FLAG,)
)
_CALLER_22 = _CALLER_23[:-1]


# Popen._posix_spawn's parameters after self, as _execute_child passes them;
# 3.13 added close_fds.
_POSIX_SPAWN_FDS = ("p2cread", "p2cwrite", "c2pread", "c2pwrite", "errread", "errwrite")
_POSIX_SPAWN_39 = ("args", "executable", "env", "restore_signals", *_POSIX_SPAWN_FDS)
_POSIX_SPAWN_313 = ("args", "executable", "env", "restore_signals", "close_fds",
                    *_POSIX_SPAWN_FDS)

#: The four calls of _execute_child's error pipe, as CPython writes them, each
#: with the ``os`` function it calls (``dropin/execute_child.py`` replaces that).
ERRPIPE_CALLS = (
    ("errpipe_read, errpipe_write = os.pipe()", "pipe"),
    ("os.close(errpipe_write)", "close"),
    ("os.read(errpipe_read, ", "read"),
    ("os.close(errpipe_read)", "close"),
)
#: Every statement of _execute_child that names errpipe_read or errpipe_write,
#: but its fork_exec call, once each (3.9-3.15): a pipe kept in memory is a
#: number no system call takes, so one more statement that hands it to ``os``
#: would fail every spawn (EBADF).
ERRPIPE_LINES = (
    "errpipe_read, errpipe_write = os.pipe()",
    "while errpipe_write < 3:",
    "low_fds_to_close.append(errpipe_write)",
    "errpipe_write = os.dup(errpipe_write)",
    "fds_to_keep.add(errpipe_write)",
    "os.close(errpipe_write)",
    "part = os.read(errpipe_read, 50000)",
    "os.close(errpipe_read)",
)
_ERRPIPE_NAMES = ("errpipe_read", "errpipe_write")


class PosixSpawn(NamedTuple):
    """``Popen._posix_spawn`` of the running CPython, as :func:`require` found it."""

    #: CPython's own, below any wrapper (RDMASPAWN's start-up stand-in, say).
    function: Callable[..., Any]
    params: tuple[str, ...]
    #: convert.c's rs_spawn_posix() spec, in its order: the positions (a byte
    #: each; 0xff: no close_fds before 3.13), the file actions' int wording,
    #: os.posix_spawn's own errors, and os where env=None means os.environ
    #: (3.9-3.12), else None (the C environ).
    conversion: tuple[Any, ...]


class Internals(NamedTuple):
    """What one CPython version's subprocess does, where rdmaspawn depends on it."""

    params: tuple[str, ...]  # fork_exec's, in order
    caller: tuple[str, ...]  # what _execute_child loads to call it (_CALLER_21)
    posix_spawn_params: tuple[str, ...]
    #: Whether fork_exec can vfork() (3.10+). In the table: nothing Python
    #: sees tells 3.9 from 3.10.0-3.10.4, which have no _USE_VFORK.
    can_vfork: bool
    #: multiprocessing's default start method on Linux. In the table: looking
    #: would import multiprocessing, which then holds rdmaspawn's preference.
    mp_default: str
    # Looked up by _looked_up(), never from TABLE: a patch release, a build
    # or a distribution can differ.
    #: Where _execute_child finds fork_exec: (module name, attribute).
    home: tuple[str, str] = ("", "")
    #: The tag after "OSError:<errno>:" for a failed chdir() in the child.
    chdir_tag: bytes = b""
    #: Whether Popen._get_handles closes its pipes when a later one fails
    #: (not Debian 12's 3.11.2).
    get_handles_cleans_up: bool = False
    #: fork_exec's TypeError for a wrong count, formatted with wanted, given.
    wrong_count: str = ""
    #: fork_exec's wording for convert.c, in its enum rs_wording's order:
    #: _WORDINGS' four, _int_wordings(), and "1" where restore_signals and
    #: call_setsid are C ints, not taken by their truth. () for an unknown parser.
    fork_exec_wording: tuple[str, ...] = ()
    #: Popen._posix_spawn where it is the one known and _execute_child takes
    #: it where _USE_POSIX_SPAWN says; else None, and CPython's own runs.
    posix_spawn: PosixSpawn | None = None
    posix_spawn_differs: str = ""  # why posix_spawn is None
    #: Where Popen() takes preexec_fn positionally.
    preexec_fn_position: int = -1


#: os.posix_spawn's ValueError for a bytes path with a NUL (str too on 3.13+).
POSIX_SPAWN_PATH_NUL = "posix_spawn: embedded null character in path"
_V39 = Internals(params=_PARAMS_21, caller=_CALLER_21, posix_spawn_params=_POSIX_SPAWN_39,
                 can_vfork=False, mp_default="fork")
_V311 = _V39._replace(params=_PARAMS_23, caller=_CALLER_23, can_vfork=True)
_V313 = _V311._replace(posix_spawn_params=_POSIX_SPAWN_313)
# 3.14: fork_exec lost allow_vfork (22 arguments), subprocess lost _USE_VFORK;
# multiprocessing defaults to forkserver.
_V314 = _V313._replace(params=_PARAMS_22, caller=_CALLER_22, mp_default="forkserver")

#: By sys.version_info[:2]: what changed with a minor release only. Each row
#: was read from that version's sources and checked by running it (3.14,
#: 3.15: Debian's, .ci/lanes/sid.sh); require() still checks each call.
TABLE: dict[tuple[int, int], Internals] = {
    (3, 9): _V39,
    (3, 10): _V39._replace(can_vfork=True),
    (3, 11): _V311,
    (3, 12): _V311,
    (3, 13): _V313,
    (3, 14): _V314,
    (3, 15): _V314,
}


def _posix_spawn_refuses(*args: Any) -> str:
    """os.posix_spawn's own message for a call it refuses before anything starts."""
    try:
        os.posix_spawn(*args)
    except (TypeError, ValueError) as exc:
        return str(exc)
    raise AssertionError(f"os.posix_spawn took {args!r}")  # pragma: no cover


#: By fork_exec's parser (PyArg_ParseTuple's "i", 3.9-3.11; Argument Clinic,
#: 3.12+): its wrong-count, too-many-groups, group-no-int and keywords errors.
_WORDINGS = {
    "format_i": ("fork_exec() takes exactly {wanted} arguments ({given} given)",
                 "too many groups", "groups must be integers",
                 "fork_exec() takes no keyword arguments"),
    "clinic": ("fork_exec expected {wanted} arguments, got {given}", "too many extra_groups",
               "extra_groups must be integers",
               "_posixsubprocess.fork_exec() takes no keyword arguments"),
}


class _IntProbe:
    """A value that no C int parser takes: its name shows in what it says."""


def _i_refusals() -> tuple[str, str]:
    """PyArg_ParseTuple "i"'s words for a float and for a type with no
    __index__ ("{}": its name), or "" where PyNumber_Index says them (3.10+;
    asked, as a build may differ): os.posix_spawn parses its file actions
    with "i" before anything starts."""
    said = []
    for probe in (1.5, _IntProbe()):
        try:
            os.posix_spawn("/", ["/"], {}, file_actions=[(os.POSIX_SPAWN_CLOSE, probe)])
        except TypeError as exc:
            words = str(exc)
            said.append("" if words.endswith("object cannot be interpreted as an integer")
                        else words.replace(_IntProbe.__name__, "{}"))
        except Exception:  # noqa: BLE001 - refused otherwise: PyNumber_Index's words
            said.append("")
        else:  # pragma: no cover
            raise AssertionError("os.posix_spawn took a file action it cannot parse")
    return said[0], said[1]


def _int_wordings(parser: str) -> tuple[str, ...]:
    """By int parser, a C int argument's errors, in convert.h's order ("": not said)."""
    if parser == "clinic":
        return ("Python int too large to convert to C int", "", "", "", "", "")
    return ("", "Python int too large to convert to C long",
            "signed integer is greater than maximum", "signed integer is less than minimum",
            *_i_refusals())


def _fork_exec_parser(wanted: int) -> str:
    """Which parser CPython's fork_exec has ("" if neither), by its TypeError
    for no arguments (both count first: nothing starts). CPython's own, below
    any wrapper: a stand-in's call would run the deferred patch() in require()."""
    try:
        innermost(_posixsubprocess.fork_exec)()
    except TypeError as exc:
        said = str(exc)
    else:  # pragma: no cover
        raise AssertionError("fork_exec took no arguments")
    for parser, (count, *_) in _WORDINGS.items():
        if said == count.format(wanted=wanted, given=0):
            return parser
    return ""


class _Asked(Exception):
    pass


class _FlagProbe:
    """Says which conversion fork_exec asks of it, by raising."""

    def __bool__(self) -> bool:
        raise _Asked("bool")

    def __index__(self) -> int:
        raise _Asked("index")


def _flags_by_truth(params: tuple[str, ...]) -> bool:
    """Whether fork_exec takes restore_signals by its truth: a call whose
    arguments before it are valid, and restore_signals a probe, stops at its
    conversion, before anything starts (both parsers convert in order)."""
    valid = {"args": [b"x"], "executable_list": [b"x"], "close_fds": True,
             "fds_to_keep": (), "cwd": None, "env_list": None}
    call = [valid.get(name, -1) for name in params[:params.index("restore_signals")]]
    try:
        innermost(_posixsubprocess.fork_exec)(*call, _FlagProbe(),
                                             *[None] * (len(params) - len(call) - 1))
    except _Asked as asked:
        return bool(asked.args[0] == "bool")
    except Exception:  # noqa: BLE001 - an earlier argument refused: unknown, as "i"
        return False
    raise AssertionError("fork_exec took a probe")  # pragma: no cover


def _looked_up(internals: Internals) -> Internals:
    """``internals`` with the rows a patch release or a build can change read
    from this CPython, before patch() puts its own methods in place."""
    popen: Any = subprocess.Popen
    parser = _fork_exec_parser(len(internals.params))
    execute_child = popen._execute_child
    posix_spawn, differs = _posix_spawn(popen, internals.posix_spawn_params)
    flags_as_int = "" if _flags_by_truth(internals.params) else "1"
    init_names = innermost(popen.__init__).__code__.co_varnames
    return internals._replace(
        home=_home(execute_child),
        chdir_tag=(b"noexec:chdir" if "noexec:chdir" in execute_child.__code__.co_consts
                   else b"noexec"),
        get_handles_cleans_up=hasattr(popen, "_on_error_fd_closer"),
        wrong_count=_WORDINGS[parser][0] if parser else "",
        posix_spawn=posix_spawn,
        posix_spawn_differs=differs,
        # Its parameters come first in co_varnames, self the first of them
        # (not inspect, which start-up does without); -1 where it has none.
        preexec_fn_position=(init_names.index("preexec_fn") - 1 if "preexec_fn" in init_names
                             else -1),
        fork_exec_wording=((*_WORDINGS[parser], *_int_wordings(parser), flags_as_int)
                           if parser else ()),
    )


def _home(execute_child: Callable[..., Any]) -> tuple[str, str]:
    """The place of :data:`FORK_EXEC_HOMES` through which ``execute_child``
    calls fork_exec; else the last that exists (then _check refuses the call)."""
    found = [home for home in FORK_EXEC_HOMES
             if hasattr(sys.modules.get(home[0]), home[1])]
    for home in reversed(found):  # the alias first: 3.11+ has both
        if _caller_loads(execute_child, home) is not None:
            return home
    return found[-1]


CO_VARARGS, CO_VARKEYWORDS = 0x04, 0x08  # inspect's, which start-up does without


def _posix_spawn(popen: Any, known: tuple[str, ...]) -> tuple[PosixSpawn | None, str]:
    """Popen._posix_spawn where it takes the parameters ``known`` and
    _execute_child reaches it through _USE_POSIX_SPAWN; else None, and why."""
    function = innermost(getattr(popen, "_posix_spawn", None))
    code = getattr(function, "__code__", None)
    if code is None:
        return None, "subprocess.Popen has no _posix_spawn written in Python"
    params = code.co_varnames[1:code.co_argcount]
    if (params != known or code.co_kwonlyargcount
            or code.co_flags & (CO_VARARGS | CO_VARKEYWORDS)):
        taken = code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount]
        return None, (f"subprocess.Popen._posix_spawn takes ({', '.join(taken)}) where "
                      f"rdmaspawn knows ({', '.join(known)})")
    called = popen._execute_child.__code__.co_names
    if POSIX_SPAWN_FLAG not in called or "_posix_spawn" not in called:
        return None, (f"subprocess.Popen._execute_child does not take _posix_spawn "
                      f"where {POSIX_SPAWN_FLAG} says")
    at = {name: i for i, name in enumerate(params)}
    positions = bytes((len(params), at["args"], at["executable"], at["env"],
                       at["restore_signals"], at.get("close_fds", 0xFF),
                       *(at[name] for name in _POSIX_SPAWN_FDS)))
    conversion = (positions, ("", "", "", "", *_int_wordings("format_i"), ""),
                  _posix_spawn_refuses("\0", ["\0"], {}), POSIX_SPAWN_PATH_NUL,
                  _posix_spawn_refuses("/", ["x"], 0),
                  os if "environ" in code.co_names else None)
    return PosixSpawn(function, params, conversion), ""


_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_GLOBAL", "LOAD_DEREF",
          "LOAD_NAME", "LOAD_FAST_BORROW", "LOAD_FAST_BORROW_LOAD_FAST_BORROW")


def _caller_loads(func: Callable[..., Any], home: tuple[str, str]
                  ) -> tuple[tuple[str, ...], int] | None:
    """The names ``func`` loads between naming fork_exec and calling it (from
    its last naming before the call: patch()'s method also names it for its
    error pipe), and the call's argument count; None where it makes no such call."""
    key = (func.__code__, home)
    if key not in _scanned:  # the gate asks twice: _home(), then _check()
        _scanned[key] = None
        names: list[str] | None = None
        for ins in dis.get_instructions(func):
            if ins.argval == home[1] and ins.opname in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD"):
                names = []
            elif names is None:
                continue
            elif ins.opname.startswith("CALL") and (ins.arg or 0) >= len(_PARAMS_21) - 1:
                _scanned[key] = (tuple(names), ins.arg or 0)
                break
            elif ins.opname in _LOADS:
                names.extend(ins.argval if isinstance(ins.argval, tuple) else [ins.argval])
    return _scanned[key]


_scanned: dict[tuple[Any, tuple[str, str]], tuple[tuple[str, ...], int] | None] = {}


def _unlike(call: tuple[tuple[str, ...], int] | None, internals: Internals) -> str:
    """How _execute_child's fork_exec call differs from the one known, in
    words; "" where it does not."""
    if call is None:
        return "it makes no call of fork_exec"
    loads, count = call
    known = internals.caller
    if loads == known and count == len(internals.params):
        return ""
    if loads == known:
        return f"it passes {count} arguments, not {len(internals.params)}"
    missing = [name for name in known if name not in loads]
    extra = [name for name in loads if name not in known]
    said = [f"it does not pass {', '.join(missing)}"] if missing else []
    said += [f"it also passes {', '.join(extra)}"] if extra else []
    return "; ".join(said) or f"it passes ({', '.join(loads)}) in another order"


def _check(version: tuple[int, int], free_threaded: bool = False) -> Internals:
    shown = f"CPython {version[0]}.{version[1]}"
    unavailable = ("rdmaspawn.Popen and rdmaspawn.patch() are unavailable; "
                   "rdmaspawn.spawn() works. Upgrade rdmaspawn (pip install -U rdmaspawn)")
    if free_threaded:
        # Not known to be safe: the C environment copy for env=None relies on
        # the GIL to keep os.environ changes out while it reads.
        raise UnsupportedPython(
            f"rdmaspawn does not support free-threaded {shown}t: rdmaspawn.Popen and "
            "rdmaspawn.patch() are unavailable; use CPython's default (GIL) build")
    known = TABLE.get(version)
    if known is None:
        raise UnsupportedPython(
            f"rdmaspawn does not know the subprocess internals of {shown} "
            f"(it knows {min(TABLE)[0]}.{min(TABLE)[1]}-{max(TABLE)[0]}.{max(TABLE)[1]}): "
            f"{unavailable}, or run a CPython it knows")
    try:
        internals = _looked_up(known)
    except (AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
        # A subprocess changed past what the lookups can read: refused, not raised.
        raise UnsupportedPython(
            f"{shown}'s subprocess is not the one rdmaspawn knows ({type(exc).__name__}: "
            f"{exc}): {unavailable}") from None
    if not internals.fork_exec_wording:
        raise UnsupportedPython(
            f"{shown}'s _posixsubprocess.fork_exec parses its arguments in a way rdmaspawn "
            f"does not know: {unavailable}")
    if internals.preexec_fn_position < 0:
        raise UnsupportedPython(f"{shown}'s subprocess.Popen takes no preexec_fn: {unavailable}")
    module, attr = internals.home
    unlike = _unlike(_caller_loads(subprocess.Popen._execute_child,  # type: ignore[attr-defined]
                                   internals.home), internals)
    if not unlike and module != "subprocess" and (
            getattr(subprocess, module, None) is not sys.modules[module]):
        # _execute_child reaches fork_exec through subprocess's global of that
        # name: the module patch() changes, or the call would bypass it.
        unlike = f"subprocess's {module} is not the module {module}"
    if unlike:
        raise UnsupportedPython(
            f"{shown}'s subprocess.Popen._execute_child does not call fork_exec "
            f"({module}.{attr}) the way rdmaspawn knows for {shown}: {unlike}: {unavailable}")
    return internals


_current: Internals | None = None
_error: UnsupportedPython | None = None


def require() -> Internals:
    """This CPython's :class:`Internals`; raises :class:`UnsupportedPython` if unknown."""
    global _current, _error
    if _current is not None:
        return _current
    if _error is None:
        try:
            _current = _check(sys.version_info[:2],
                              bool(sysconfig.get_config_var("Py_GIL_DISABLED")))
            return _current
        except UnsupportedPython as exc:
            _error = exc
    raise UnsupportedPython(str(_error))


def current() -> Internals | None:
    """This CPython's :class:`Internals`, or None where rdmaspawn does not know them."""
    try:
        return require()
    except UnsupportedPython:
        return None


def fork_exec_places() -> list[tuple[Any, str]]:
    """Each place of :data:`FORK_EXEC_HOMES` that this process has, as
    ``(module, attribute)``: what the guard wraps (every one, known CPython
    or not: wrapping one that is never called costs nothing)."""
    return [(sys.modules[module], attr) for module, attr in FORK_EXEC_HOMES
            if hasattr(sys.modules.get(module), attr)]


def fork_exec_positions(names: tuple[str, ...]) -> tuple[int, ...]:
    """Where each of ``names`` (csrc/python/fork_exec.c's order) sits in this
    CPython's fork_exec call; -1 for one it does not pass."""
    params = require().params
    return tuple(params.index(name) if name in params else -1 for name in names)


def errpipe_calls(source: str) -> tuple[tuple[str, str], ...] | None:
    """The gate of :data:`ERRPIPE_CALLS`: those calls, where ``source`` (this
    CPython's ``_execute_child``, as dropin/execute_child.py reads it) makes
    each once and names errpipe_read and errpipe_write in no statement but
    :data:`ERRPIPE_LINES` (once each) and its one fork_exec call; else None,
    and the pipe stays a real one."""
    import tokenize  # here: only the first spawn that recompiles the method reads it

    internals = current()
    if internals is None or any(source.count(old) != 1 for old, _ in ERRPIPE_CALLS):
        return None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, tokenize.TokenError):
        return None
    lines = source.splitlines()
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER)
    calls, rest, part = 0, [], []
    for tok in tokens:
        if tok.type in skip:
            continue
        if tok.type != tokenize.NEWLINE:
            part.append(tok)
            continue
        # A statement naming the pipe: its one line's text, comments left out
        # ("" where it spans lines), unless it is the fork_exec call.
        first, last = part[0], part[-1]
        names = {t.string for t in part if t.type == tokenize.NAME}
        part = []
        if names.isdisjoint(_ERRPIPE_NAMES):
            continue
        if internals.home[1] in names:
            calls += 1
        else:
            rest.append(lines[first.start[0] - 1][first.start[1]:last.end[1]]
                        if first.start[0] == last.end[0] else "")
    if calls != 1 or sorted(rest) != sorted(ERRPIPE_LINES):
        return None
    return ERRPIPE_CALLS


def unpack_fork_exec(args: tuple[Any, ...]) -> ForkExecCall:
    """A positional ``fork_exec`` call by name; TypeError for a wrong count."""
    internals = require()
    params = internals.params
    if len(args) != len(params):
        raise TypeError(internals.wrong_count.format(wanted=len(params), given=len(args)))
    if len(params) == len(ForkExecCall._fields):
        return ForkExecCall(*args)
    # Only what this version does not pass: 3.14's call has pgid_to_set.
    return ForkExecCall(**{**_NEUTRAL, **dict(zip(params, args))})


def replace_fork_exec(args: tuple[Any, ...], **values: Any) -> tuple[Any, ...]:
    """A positional ``fork_exec`` call with the named arguments replaced."""
    params = require().params
    out = list(args)
    for name, value in values.items():
        out[params.index(name)] = value
    return tuple(out)


def fork_exec_forks(call: ForkExecCall, preexec_only: bool = False) -> bool:
    """Whether CPython's fork_exec forks for this call, rather than vfork();
    with ``preexec_only`` (rdmaspawn's fork_exec) only a preexec_fn counts."""
    if call.preexec_fn is not None:
        return True
    if preexec_only:
        return False
    if not require().can_vfork:
        return True
    if call.gid not in (None, -1) or call.uid not in (None, -1) or call.extra_groups is not None:
        return True
    return not call.allow_vfork


def use_vfork_flag() -> bool:
    """The ``subprocess._USE_VFORK`` that this CPython's fork_exec obeys (3.14+,
    which has none, ignores one set by hand)."""
    internals = current()
    if internals is not None and "allow_vfork" not in internals.params:
        return True
    return bool(getattr(subprocess, VFORK_FLAG, True))
