"""What the rank's children run: picklable, and light (no torch import here).

multiprocessing's spawn and forkserver children import this module by name
(the rank script's directory is on their ``sys.path``), so it must not import
torch at module level: each such child would pay for it.
"""
from __future__ import annotations

import os


def square(x: int) -> int:
    return x * x


def write_pid(index: int, path: str) -> None:
    """torch.multiprocessing.spawn's target: leave proof that the child ran."""
    with open(f"{path}.{index}", "w") as f:
        f.write(str(os.getpid()))


class Squares:
    """A map-style dataset (all DataLoader needs: __len__ and __getitem__)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i * i
