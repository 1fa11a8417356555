"""fork_status()'s own probe page is no hazard to a fork in another thread (issue 27, item 6).

Where libibverbs answers "unneeded", fork_status() used to ask it to mark a
page of its own and look at smaps. A guarded fork in another thread at that
moment saw the marked page and refused: 229-314 of 800 forks under
guard("raise"). fork_status() now reads smaps without marking anything
(issue 27 item 7, tests/test_fork_status_too_late.py); this keeps it so. The
libibverbs here is a small stand-in built by the test (the real one answers
"unneeded" only with an RDMA driver loaded): it answers "unneeded" and marks
with the real madvise(), as rdma-core 35-50 does with fork protection on.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import standin_verbs

VERBS = r"""
#include <stddef.h>
#include <sys/mman.h>
int ibv_is_fork_initialized(void) { return 2; }  /* IBV_FORK_UNNEEDED */
int ibv_fork_init(void) { return 0; }
int ibv_dontfork_range(void *a, size_t n) { return madvise(a, n, MADV_DONTFORK); }
int ibv_dofork_range(void *a, size_t n) { return madvise(a, n, MADV_DOFORK); }
"""

CHILD = r"""
import ctypes, json, os, sys, threading
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import rdmaspawn
from rdmaspawn.tools.guard import ForkHazardError, guard
probes = [0]
stop = threading.Event()
def loop():
    while not stop.is_set():
        rdmaspawn.fork_status()
        probes[0] += 1
t = threading.Thread(target=loop)
t.start()
guard("raise")
refused, named = 0, []
for _ in range(int(sys.argv[2])):
    try:
        pid = os.fork()
    except ForkHazardError as e:
        refused += 1
        named = [m.describe() for m in e.mappings]
        continue
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
stop.set()
t.join()
print(json.dumps({"refused": refused, "named": named, "probes": probes[0],
                  "library": rdmaspawn.fork_status().library}))
"""


@pytest.fixture(scope="module")
def stand_in_verbs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return standin_verbs.build(tmp_path_factory, VERBS)


def test_guarded_forks_beside_fork_status(stand_in_verbs: Path) -> None:
    """400 forks under guard("raise") while another thread loops on
    fork_status(), whose probe runs (the stand-in is the library it asks):
    none is refused."""
    res = subprocess.run([sys.executable, "-c", CHILD, str(stand_in_verbs), "400"],
                         stdout=subprocess.PIPE, text=True, timeout=300, check=True)
    out = json.loads(res.stdout)
    assert out["library"] == str(stand_in_verbs)
    assert out["probes"] > 0
    assert out["refused"] == 0, out
