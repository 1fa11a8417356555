"""docs/rdma-core-matrix.md from the matrix's measurements (matrix.sh's JSON lines).

    python matrix_table.py RESULTS.jsonl... > docs/rdma-core-matrix.md

tests/realdevice/test_matrix.py checks the committed page against a fresh run.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable

SUITES = ("bullseye", "bookworm", "trixie", "sid")
SETUPS = ("none", "env", "ibv_fork_init", "rdmaspawn.fork_init")
SETUP_WORDS = {
    "none": "nothing",
    "env": "`RDMAV_FORK_SAFE=1`",
    "ibv_fork_init": "`ibv_fork_init()`",
    "rdmaspawn.fork_init": "`rdmaspawn.fork_init()`",
}

HEAD = """# libibverbs fork protection, measured: rdma-core x kernel

Written by `tests/realdevice/matrix_table.py` from a run of
`tests/realdevice/matrix.sh` on a soft-RoCE device (`rdma_rxe`) in a VM
(`.ci/lanes/rxe.sh`); `tests/realdevice/test_matrix.py` fails when a run
measures anything else.  Each row: one process that turned fork protection on
the way the first column says (before any registration), then registered
256 bytes that a fresh thread malloc()ed (they share a page with the thread
arena's header) on rxe0.

- *ibv_fork_init()*: its return value, where the row called it;
- *answers*: `ibv_is_fork_initialized()` after the registration (absent
  before rdma-core 35);
- *dc*: the registered page is `dc` (MADV_DONTFORK) in smaps;
- *fork() child*: how a child of `os.fork()` that only `_exit(0)`s ends;
- *fork_status()*, *fork_init()*: rdmaspawn's answers after the
  registration (`fork_init()` first, for its own row);
- *doctor*: the doctor's verdict on the process and its fork-protection case;
- *then repair_fork()*: `rdmaspawn.repair_fork()` called after all that, in
  force or refused, whether the page is still `dc`, and how the same fork()
  child ends then.

"""


def _release(library: str) -> str:
    m = re.search(r"libibverbs\.so\.1\.\d+\.(\d+)\.(\d+)$", library)
    return f"{m.group(1)}.{m.group(2)}" if m else library


def _kernel(release: str) -> str:
    return ".".join(release.split(".")[:2])


def table(cells: Iterable[dict]) -> str:
    by_key = {(c["suite"], _kernel(c["kernel"]), c["setup"]): c for c in cells}
    kernels = sorted({k for _, k, _ in by_key}, key=lambda k: tuple(map(int, k.split("."))),
                     reverse=True)
    out = [HEAD.rstrip("\n"), ""]
    for kernel in kernels:
        out += [f"## Linux {kernel}", "",
                "| rdma-core | turned on by | ibv_fork_init() | answers | dc | fork() child "
                "| fork_status() | fork_init() | doctor | then repair_fork() |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for suite in SUITES:
            for setup in SETUPS:
                c = by_key.get((suite, kernel, setup))
                if c is None:
                    out.append(f"| ({suite}) | {SETUP_WORDS[setup]} | not measured ||||||||")
                    continue
                out.append(
                    f"| {_release(c['library'])} ({suite}) | {SETUP_WORDS[setup]} "
                    f"| {c.get('ibv_fork_init', '')} | {c['ibv_is_fork_initialized']} "
                    f"| {'yes' if c['dc'] else 'no'} | {c['fork']} | {c['fork_status']} "
                    f"| {c['fork_init']} | {c['doctor']} ({c['doctor_case']}) "
                    f"| {c['repair']}: {'dc' if c['repaired_dc'] else 'not dc'}, "
                    f"child {c['repaired_fork']} |")
        out.append("")
    return "\n".join(out)


def read(paths: Iterable[str]) -> list[dict]:
    cells = []
    for p in paths:
        with open(p) as f:
            cells += [json.loads(line) for line in f if line.strip()]
    return cells


if __name__ == "__main__":
    sys.stdout.write(table(read(sys.argv[1:])))
