"""What holding SIGINT around a spawn costs rdmaspawn.Popen in the main thread.

Times ``interrupts.owner()``, ``hold()``, ``replay()`` and ``release()`` alone
(what every Popen() in the main thread adds while SIGINT has a Python
handler), and, for scale, ``rdmaspawn.Popen(["/bin/true"]).wait()`` with
SIGINT's default Python handler (held) and with SIGINT ignored (nothing to
hold). Medians of BATCHES batches, in microseconds; a measurement, not a test.
"""
from __future__ import annotations

import argparse
import signal
import statistics
import time

from rdmaspawn.dropin import interrupts
from rdmaspawn.dropin.popen import Popen


def per_pair_us(pairs: int) -> float:
    start = time.perf_counter()
    for _ in range(pairs):
        if interrupts.owner():
            interrupts.hold()
            interrupts.replay()
            interrupts.release()
    return (time.perf_counter() - start) / pairs * 1e6


def per_spawn_us(spawns: int) -> float:
    start = time.perf_counter()
    for _ in range(spawns):
        Popen(["/bin/true"]).wait()
    return (time.perf_counter() - start) / spawns * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--spawns", type=int, default=200)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    pair = statistics.median(per_pair_us(args.pairs) for _ in range(args.batches))
    held: list[float] = []
    ignored: list[float] = []
    for _ in range(args.batches):  # interleaved: the machine's load hits both alike
        signal.signal(signal.SIGINT, signal.default_int_handler)
        held.append(per_spawn_us(args.spawns))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        ignored.append(per_spawn_us(args.spawns))
    print(f"owner(), hold(), replay(), release(): {pair:6.2f} us")
    print(f"Popen(['/bin/true']).wait(), held:  {statistics.median(held):8.1f} us")
    print(f"the same, SIGINT ignored (no hold): {statistics.median(ignored):8.1f} us")


if __name__ == "__main__":
    main()
