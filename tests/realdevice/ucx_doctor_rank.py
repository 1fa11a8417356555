"""One mpi4py rank for test_ucx_doctor_rxe.py: swap 1 MiB buffers with the
other rank through UCX, then have the doctor look at this process from
outside (``rdmaspawn doctor --pid PID --json``, started with rdmaspawn.Popen
while the buffers are still registered) and print one JSON line."""

from __future__ import annotations

import json
import os
import sys

from mpi4py import MPI

import rdmaspawn

SIZE = 1 << 20
ROUNDS = 4

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
peer = 1 - rank
send = bytearray([rank + 1]) * SIZE
recv = bytearray(SIZE)
moved = 0
for _ in range(ROUNDS):
    comm.Sendrecv([send, MPI.BYTE], dest=peer, recvbuf=[recv, MPI.BYTE], source=peer)
    assert recv[0] == peer + 1 and recv[-1] == peer + 1
    moved += SIZE
comm.Barrier()
doctor = rdmaspawn.Popen([sys.executable, "-m", "rdmaspawn", "doctor", "--pid", str(os.getpid()),
                          "--json"], stdout=rdmaspawn.PIPE, text=True)
out, _ = doctor.communicate(timeout=600)
report = json.loads(out)
print(json.dumps({"rank": rank, "moved": moved, "doctor_exit": doctor.returncode,
                  "verdict": report.get("verdict"), "fork_status": report.get("fork_status"),
                  "rdmaspawn": report.get("rdmaspawn"), "ucx": report.get("ucx")}), flush=True)
comm.Barrier()
