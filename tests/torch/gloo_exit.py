"""A minimal 2-rank gloo job for measure_exit_aborts.py: join, all-reduce, leave.

It returns from the script without destroy_process_group(), as many training
scripts do, so the process group is torn down during interpreter shutdown.
``GLOO_EXIT_SPAWN=1`` also starts one child (``subprocess.run``) first, so
that under rdmaspawn the engine has run in the rank (its per-thread child
stack exists) before exit.
"""
import os
import subprocess

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
if os.environ.get("GLOO_EXIT_SPAWN") == "1":
    subprocess.run(["true"], check=True)
