# The cffi-generated extension (csrc/build_ffi.py, from the cdef blocks of
# csrc/rdmaspawn.h and csrc/python/binding.h): what _native/engine.py uses of it, typed, so that mypy --strict
# checks the binding. A C declaration that changes changes here too.
from typing import Literal, overload

class CData:
    """A C value or pointer held by cffi."""

    def __getitem__(self, index: int) -> CData: ...
    def __setitem__(self, index: int, value: object) -> None: ...

class IntPtr(CData):
    """``int *`` from ffi.new("int *")."""

    def __getitem__(self, index: int) -> int: ...  # type: ignore[override]

class RsResult(CData):
    """``struct rs_result *``."""

    pid: int
    pidfd: int
    err: int
    step: int
    clone_method: int
    exec_index: int

class RsRepairStats(CData):
    """``struct rs_repair_stats *`` (the fork repair's counts)."""

    active: int
    libraries: int
    rewritten: int
    unmarked: int
    sweeps: int
    small: int
    bounded: int
    mark_min: int
    mark_bound: int

class RsSetup(CData):
    """``struct rs_setup *`` (the declarative setup)."""

    session: int
    set_pgid: int
    pgid: int
    cgroup_fd: int
    cgroup_procs_fd: int
    cgroup_procs_path: CData
    ctty_fd: int
    rlimits: CData
    n_rlimits: int
    set_nice: int
    nice: int
    set_ioprio: int
    ioprio: int
    cpu_mask: CData
    cpu_mask_bytes: int
    early_after_ids: int
    ignore_signals: int
    default_signals: int
    set_signal_mask: int
    signal_mask: int
    no_new_privs: int
    pdeathsig: int
    parent_pid: int

# A pointer argument: bytes and lists are passed as pointers to a copy.
_Bytes = bytes | CData
_Ints = list[int] | CData

class FFI:
    NULL: CData
    @overload
    def new(self, cdecl: Literal["struct rs_result *"]) -> RsResult: ...
    @overload
    def new(self, cdecl: Literal["int *"]) -> IntPtr: ...
    @overload
    def new(self, cdecl: Literal["struct rs_setup *"]) -> RsSetup: ...
    @overload
    def new(self, cdecl: Literal["struct rs_repair_stats *"]) -> RsRepairStats: ...
    @overload
    def new(self, cdecl: Literal["char[]"], init: int | bytes) -> CData: ...
    @overload
    def new(self, cdecl: Literal["struct rs_rlimit[]"], init: list[list[int]]) -> CData: ...
    @overload
    def new(self, cdecl: Literal["unsigned long long[]"], init: list[int]) -> CData: ...
    @overload
    def new(self, cdecl: Literal["char *[]"], init: int) -> CData: ...
    def string(self, cdata: CData, maxlen: int = ...) -> bytes: ...
    def cast(self, cdecl: Literal["uintptr_t"], value: CData, /) -> int: ...
    def from_buffer(self, cdecl: Literal["char *[]"], buffer: bytes, /) -> CData: ...
    def memmove(self, dest: CData, src: CData, n: int, /) -> None: ...
    def sizeof(self, cdecl: Literal["char *"], /) -> int: ...

class Lib:
    # enum rs_step
    RS_STEP_NONE: int
    RS_STEP_CLONE: int
    RS_STEP_KEEP_FDS: int
    RS_STEP_DUP: int
    RS_STEP_DUP2: int
    RS_STEP_CHDIR: int
    RS_STEP_SIGNALS: int
    RS_STEP_SETSID: int
    RS_STEP_SETPGID: int
    RS_STEP_SETGROUPS: int
    RS_STEP_SETGID: int
    RS_STEP_SETUID: int
    RS_STEP_CLOSE_FDS: int
    RS_STEP_EXEC: int
    RS_STEP_PREPARE: int
    RS_STEP_SIGACTION: int
    RS_STEP_SETUP_SETSID: int
    RS_STEP_SETUP_SETPGID: int
    RS_STEP_CGROUP: int
    RS_STEP_CTTY: int
    RS_STEP_RLIMIT: int
    RS_STEP_NICE: int
    RS_STEP_IOPRIO: int
    RS_STEP_AFFINITY: int
    RS_STEP_NO_NEW_PRIVS: int
    RS_STEP_PDEATHSIG: int
    # enum rs_session
    RS_SESSION_KEEP: int
    RS_SESSION_NEW: int
    RS_SESSION_SETSID: int
    # enum rs_close_method
    RS_CLOSE_AUTO: int
    RS_CLOSE_PROC: int
    RS_CLOSE_LOOP: int
    # enum rs_clone_method
    RS_CLONE_NONE: int
    RS_CLONE_CLONE3: int
    RS_CLONE_CLONE: int
    # enum rs_clone_path
    RS_PATH_UNTRIED: int
    RS_PATH_CLONE3: int
    RS_PATH_CLONE_REFUSED: int
    RS_PATH_CLONE_FORCED: int
    # enum rs_flags
    RS_F_CLOSE_FDS: int
    RS_F_RESTORE_SIGNALS: int
    RS_F_SETSID: int
    RS_F_WANT_PIDFD: int
    RS_F_REAP_ON_FAILURE: int
    RS_F_FORCE_CLONE: int
    # enum rs_fail_status
    RS_FAIL_STATUS_CPYTHON: int
    # enum rs_fork_state
    RS_FORK_UNAVAILABLE: int
    RS_FORK_DISABLED: int
    RS_FORK_ENABLED: int
    RS_FORK_UNNEEDED: int
    RS_FORK_UNKNOWN: int

    environ: CData  # char **, read with the GIL held

    def rs_spawn_packed(
        self,
        argv: CData, exec_list: CData, envp: CData,
        cwd: _Bytes,
        keep_fds: _Ints, n_keep_fds: int,
        close_first: _Ints, n_close_first: int,
        stdin_fd: int, stdout_fd: int, stderr_fd: int,
        flags: int, close_method: int, umask: int, pgid: int,
        groups: _Ints, ngroups: int,
        gid: int, uid: int, fail_status: int,
        res: RsResult,
        setup: CData,
        /,
    ) -> int: ...
    def rs_spawn(self, req: CData, res: RsResult, /) -> int: ...
    def rs_step_name(self, step: int, /) -> CData: ...
    def rs_spawn_count(self) -> int: ...
    def rs_clone_path(self) -> int: ...
    def rs_force_clone_fallback(self) -> None: ...
    def rs_fork_status(self, libpath: CData, libpath_len: int, /) -> int: ...
    def rs_fork_init(self, libpath: CData, libpath_len: int, err: IntPtr, /) -> int: ...
    # csrc/forkrepair.c, csrc/unmark.c: the fork repair
    def rs_repair_start(self) -> int: ...
    def rs_repair_stats(self, out: RsRepairStats, /) -> None: ...
    def rs_repair_exact(self, lo: int, hi: int, /) -> int: ...
    def rs_driver_mapping(self, path: _Bytes, io_or_pfnmap: int, /) -> int: ...
    def rs_marker_set(self, slot: int, name: _Bytes | CData, /) -> int: ...
    RS_MARKER_PATCH: int
    RS_MARKER_GUARD: int
    RS_MARKER_REPAIR: int
    RS_MARKER_SLOTS: int

ffi: FFI
lib: Lib
