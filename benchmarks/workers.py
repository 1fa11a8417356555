"""The worker processes the fork benchmarks time: a helper interpreter that
builds its shape, says so in its first line, then answers each line asked of
it with one line of JSON (one fork's figures)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from rdmaspawn._host.interpreter import python_command

FORKSHAPE = (Path(__file__).parent / "forkshape.py").read_text()  # a worker script's head


class Worker:
    """``code`` run with ``args``; ``first`` is its first line, empty where it exited."""

    def __init__(self, code: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(python_command(code, *args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.first = self.stdout.readline().strip()

    def once(self) -> Any:
        self.stdin.write("go\n")
        self.stdin.flush()
        return json.loads(self.stdout.readline())

    def close(self) -> int:
        self.stdin.close()
        return self.proc.wait()


def take_turns(workers: dict[str, Worker], rounds: int) -> dict[str, list[Any]]:
    """Each worker's answers, one a round, the order reversed every other round
    so that the machine's load hits all alike; the workers are closed after."""
    answers: dict[str, list[Any]] = {k: [] for k in workers}
    try:
        for r in range(rounds):
            for k in list(workers)[::1 if r % 2 == 0 else -1]:
                answers[k].append(workers[k].once())
    finally:
        for w in workers.values():
            w.close()
    return answers
