"""Run as a child: print, as one JSON line, the state a child setup can change.

Read from inside the real child after exec: /proc/self/status, /proc/self/limits,
getpriority, ioprio_get, sched_getaffinity, the session and process group,
the umask, the cgroup, the death signal and the controlling terminal.
"""
import ctypes
import json
import os
import platform
import resource

_PR_GET_PDEATHSIG = 2
_SYS_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}


def status_fields(*names):
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in names:
                out[key] = value.strip()
    return out


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    sig = ctypes.c_int(0)
    libc.prctl(_PR_GET_PDEATHSIG, ctypes.byref(sig), 0, 0, 0)
    ioprio = libc.syscall(_SYS_IOPRIO_GET[platform.machine()], 1, 0)
    umask = os.umask(0)
    pid = os.getpid()
    try:
        tty = os.ttyname(0)
        foreground = os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        tty, foreground = None, False
    with open("/proc/self/cgroup") as f:
        cgroup = [line.strip() for line in f if line.startswith("0::")]
    state = {
        "status": status_fields("NoNewPrivs", "SigIgn", "SigBlk", "Cpus_allowed_list"),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        "core": resource.getrlimit(resource.RLIMIT_CORE),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "ioprio": ioprio,
        "affinity": sorted(os.sched_getaffinity(0)),
        "session_leader": os.getsid(0) == pid,
        "group_leader": os.getpgrp() == pid,
        "umask": umask,
        "pdeathsig": sig.value,
        "cgroup": cgroup,
        "tty": tty,
        "tty_foreground": foreground,
    }
    print(json.dumps(state))


if __name__ == "__main__":
    main()
