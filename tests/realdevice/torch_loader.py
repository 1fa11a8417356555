"""A trainer's data loading on the real device: registered memory, then a
torch DataLoader whose workers start with the default (fork) start method.

    python torch_loader.py        (with RDMAV_FORK_SAFE=1: rdma-core 44 marks)

Imports torch, registers 256 bytes a fresh thread malloc()ed on rxe0 (their
page holds the thread arena's header: verbs.py's ``malloc``), then iterates a
DataLoader with two workers over a Dataset whose items allocate. Prints one
JSON line: whether the page was marked, multiprocessing's start method,
whether rdmaspawn's fork repair is in force, and the outcome ("ok", or the
error the DataLoader raised when its workers died).  Before it, a "STEP"
line as each step ends (the test shows them on the VM's console: the lane's
watchdog takes a silent console for a hang, and importing torch alone took
the TCG guest 64-74 s of CPU).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import verbs  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from rdmaspawn._host.procfs import is_dontfork  # noqa: E402
from rdmaspawn._native.forkrepair import repair_state  # noqa: E402

_START = time.monotonic()


def step(what: str) -> None:
    """One progress line, with the seconds since torch's import and the CPU this
    process has used since it started, that import included: in CI's run of
    stop 46 the control, the VM's first torch import, had used 307 s of CPU by
    then, the run under rdmaspawn after it 143 s, and the DataLoader's failure
    came 10 s after the import."""
    print(f"STEP {what} ({time.monotonic() - _START:.0f} s in, "
          f"{time.process_time():.0f} s of CPU)", flush=True)


class Squares(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> torch.Tensor:
        junk = [bytearray(4096) for _ in range(200)]  # the worker allocates and frees
        del junk
        return torch.tensor([i * i])


def main() -> int:
    step("torch imported")
    address = verbs.Device().register_kind("malloc")
    step("registered on the device")
    report = {"dc": is_dontfork(address),
              "start_method": multiprocessing.get_start_method(),
              "repair": repair_state().active}
    try:
        loader = DataLoader(Squares(), batch_size=4, num_workers=2)
        got = []
        for batch in loader:
            got.extend(int(x) for x in batch)
            step(f"a batch of {len(batch)}")
        got.sort()
        report["outcome"] = "ok" if got == [i * i for i in range(16)] else f"bad answer {got}"
    except Exception as e:  # the outcome to record, whatever it is
        report["outcome"] = f"{type(e).__name__}: {e}"
        step(f"the loader raised {type(e).__name__}")
    step("the report")  # what follows until the test's end is the interpreter's exit
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
