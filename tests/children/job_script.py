"""A user's job script: plants the real DONTFORK hazard, then starts one kind of child.

    python job_script.py METHOD KIND

METHOD is a ``rdmaspawn.testing.hazard.plant`` method ("madvise", "verbs",
"auto") or "none". The script does not import or call rdmaspawn itself for
anything but planting: whatever protects it comes from outside (``rdmaspawn
run`` or the ``RDMASPAWN`` variable). It prints one JSON line, ``{"kind": ...,
"outcome": ...}``, where outcome is "ok", "exit N" / "signal NAME" for a child
that did not finish, "a worker died: signal NAME" for a fork Pool whose
worker died (the Pool would hang), "timeout" for a hang (bounded by TIMEOUT)
or "raised ExcType: message".
"""
from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

#: Seconds a pool gets before the script calls it a hang (JOB_TIMEOUT overrides).
TIMEOUT = float(os.environ.get("JOB_TIMEOUT", "60"))


def square(x: int) -> int:
    return x * x


def _status(code: int) -> str:
    if code < 0:
        return "signal " + signal.Signals(-code).name
    return "ok" if code == 0 else f"exit {code}"


def subprocess_user() -> str:
    # user=/extra_groups= make CPython fork (not vfork) on every version.
    return _status(subprocess.run(["true"], user=os.getuid(),
                                  extra_groups=[os.getgid()]).returncode)


def subprocess_novfork() -> str:
    # torchrun's agent: Popen(start_new_session=True); a fork on 3.9, and on
    # 3.10-3.13 wherever subprocess._USE_VFORK is false (3.14+ ignores it).
    subprocess._USE_VFORK = False  # type: ignore[attr-defined]
    return _status(subprocess.Popen(["true"], start_new_session=True).wait())


def spawnvp() -> str:
    return _status(os.spawnvp(os.P_WAIT, "true", ["true"]))


def popen() -> str:
    with os.popen("echo popen-ok") as f:
        out = f.read()
    return "ok" if out == "popen-ok\n" else f"output {out!r}"


def pool() -> str:
    with multiprocessing.Pool(2) as p:
        result = p.map_async(square, range(8))
        deadline = time.monotonic() + TIMEOUT
        while not result.ready():
            # A fork Pool replaces a worker that dies with another fork that
            # dies, for ever: a hang that burns a CPU until TIMEOUT.  The
            # first worker found dead of a signal tells it at once (only
            # fork's: another start method's exitcode reads a pipe that the
            # Pool's own thread reads too).
            if p._ctx.get_start_method() == "fork":  # type: ignore[attr-defined]
                died = [w.exitcode for w in list(p._pool)  # type: ignore[attr-defined]
                        if w.exitcode is not None and w.exitcode < 0]
                if died:
                    os._exit(_report(f"a worker died: {_status(died[0])}"))
            if time.monotonic() > deadline:
                os._exit(_report("timeout"))  # terminate() could hang too: leave at once
            result.wait(0.05)
        values = result.get()
    return "ok" if values == [x * x for x in range(8)] else f"values {values}"


def process_pool_executor() -> str:
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        values = list(ex.map(square, range(8), timeout=TIMEOUT))
    return "ok" if values == [x * x for x in range(8)] else f"values {values}"


def mp_process() -> str:
    p = multiprocessing.Process(target=square, args=(3,))
    p.start()
    p.join(TIMEOUT)
    if p.exitcode is None:
        return "timeout"
    return _status(p.exitcode)


KINDS = {f.__name__: f for f in (subprocess_user, subprocess_novfork, spawnvp, popen, pool,
                                   process_pool_executor, mp_process)}

_kind = ""


def _report(outcome: str) -> int:
    print(json.dumps({"kind": _kind, "outcome": outcome,
                      "start_method": multiprocessing.get_start_method(allow_none=True)}),
          flush=True)
    return 0


if __name__ == "__main__":
    method, _kind = sys.argv[1], sys.argv[2]
    if method != "none":
        from rdmaspawn.testing.hazard import plant

        plant(method)
    try:
        outcome = KINDS[_kind]()
    except concurrent.futures.TimeoutError:
        outcome = "timeout"
    except Exception as exc:
        outcome = f"raised {type(exc).__name__}: {exc}"
    sys.exit(_report(outcome))
