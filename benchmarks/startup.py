"""What ``RDMASPAWN`` costs an interpreter at start-up: CPU time, side by side.

Starts ``PYTHON -c pass`` (default: this interpreter) ROUNDS times with
``RDMASPAWN`` unset and ROUNDS times with ``RDMASPAWN=on``, interleaved so that
the machine's load hits both alike, and reads each child's user+system CPU
time from ``os.wait4`` (CPU, not wall time: another process on the machine
does not inflate it much). Prints the medians (and minima: the least
disturbed run), their ratio and difference; the README's start-up figure
is this output.

    python -m rdmaspawn.bench.startup [--rounds N] [--python PATH]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys


def cpu_ms(python: str, env: dict[str, str]) -> float:
    """One ``python -c pass``: its user+system CPU time, in ms."""
    proc = subprocess.Popen([python, "-c", "pass"], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{python} -c pass exited {proc.returncode}")
    return (usage.ru_utime + usage.ru_stime) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    plain_env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    on_env = {**plain_env, "RDMASPAWN": "on"}
    plain: list[float] = []
    on: list[float] = []
    for _ in range(args.rounds):
        plain.append(cpu_ms(args.python, plain_env))
        on.append(cpu_ms(args.python, on_env))
    version = subprocess.run([args.python, "-c", "import platform; print(platform.python_version())"],
                             env=plain_env, capture_output=True, text=True).stdout.strip()
    p, o = statistics.median(plain), statistics.median(on)
    print(f"CPython {version} ({platform.machine()}), {args.rounds} interpreters each, "
          "CPU time (user+system) of `python -c pass`, median (min):")
    print(f"  RDMASPAWN unset: {p:5.1f} ms ({min(plain):.1f} ms)")
    print(f"  RDMASPAWN=on:    {o:5.1f} ms ({min(on):.1f} ms)")
    print(f"  difference:      {o - p:+5.1f} ms ({min(on) - min(plain):+.1f} ms), "
          f"{o / p:.2f}x")


if __name__ == "__main__":
    main()
