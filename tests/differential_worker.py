"""The child interpreter of tests/test_differential.py.

Reads pickled requests from fd ``argv[1]``, runs each through CPython and
through rdmaspawn in this very process, and writes back both outcomes and
whether anything leaked. A request is ``(api, args, kwargs, closed)``:
``api`` is "popen" (``subprocess.Popen`` vs ``rdmaspawn.Popen``) or
"spawnv" (``os._spawnvef`` vs rdmaspawn's, as ``os.spawnv*`` under
``patch()`` call it); ``closed`` lists which of fds 0-2 this process closes
for the request (they are put back afterwards).
"""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys

import rdmaspawn
from rdmaspawn.dropin.spawnv import spawnvef


def _children() -> list[str]:
    out: list[str] = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            out += f.read().split()
    return out


def _describe(exc: BaseException) -> tuple:
    return (type(exc).__name__, getattr(exc, "errno", None), repr(getattr(exc, "filename", None)),
            str(exc))


def _popen(popen: type, args: object, kwargs: dict) -> tuple:
    try:
        p = popen(args, **kwargs)
    except Exception as exc:
        return _describe(exc)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return ("timeout",)
    return ("ok", p.returncode, out)


def _spawnv(spawn: object, args: object, kwargs: dict) -> tuple:
    file, env, func = kwargs["file"], kwargs.get("env"), getattr(os, kwargs["func"])
    try:
        return ("ok", spawn(os.P_WAIT, file, args, env, func))  # type: ignore[operator]
    except Exception as exc:
        return _describe(exc)


def _run(api: str, args: object, kwargs: dict, closed: list[int]) -> tuple:
    """Both outcomes, each with the fds and children it left behind."""
    if api == "popen":
        pairs = [(_popen, subprocess.Popen), (_popen, rdmaspawn.Popen)]
    else:
        pairs = [(_spawnv, os._spawnvef), (_spawnv, spawnvef)]  # type: ignore[attr-defined]
    saved = {fd: os.dup(fd) for fd in closed}
    results = []
    try:
        for run, how in pairs:
            for fd in closed:
                os.close(fd)
            fds, kids = set(os.listdir("/proc/self/fd")), _children()
            outcome = run(how, args, kwargs)
            leaked_fds = sorted(set(os.listdir("/proc/self/fd")) - fds)
            leaked_kids = sorted(set(_children()) - set(kids))
            results.append((outcome, leaked_fds, leaked_kids))
            for fd, copy in saved.items():
                os.dup2(copy, fd)
    finally:
        for copy in saved.values():
            os.close(copy)
    return tuple(results)


def main() -> None:
    rfd, wfd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(rfd, "rb") as inp, os.fdopen(wfd, "wb") as out:
        while True:
            head = inp.read(4)
            if not head:
                return
            request = pickle.loads(inp.read(struct.unpack("<I", head)[0]))
            data = pickle.dumps(_run(*request))
            out.write(struct.pack("<I", len(data)) + data)
            out.flush()


if __name__ == "__main__":
    main()
