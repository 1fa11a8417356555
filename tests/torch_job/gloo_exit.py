"""A minimal 2-rank gloo job for measure_exit_aborts.py: join, all-reduce, leave.

It returns from the script without destroy_process_group(), as many training
scripts do, so the process group is torn down during interpreter shutdown.

- ``GLOO_EXIT_SPAWN=1`` also starts children first, the same way with or
  without rdmaspawn (``subprocess.run``, and a "spawn" ``multiprocessing.Pool``
  whose handler thread starts the worker): under rdmaspawn the engine has
  then run in two threads of the rank (each keeps its child stack, freed by a
  thread-exit destructor) and multiprocessing's exit handlers have work to do.
- ``GLOO_EXIT_END=destroy`` ends with ``destroy_process_group()``, as a
  well-behaved script does.
"""
import multiprocessing
import os
import subprocess


def main() -> None:
    # Here, not at the top: the "spawn" worker imports this file too.
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if os.environ.get("GLOO_EXIT_SPAWN") == "1":
        subprocess.run(["true"], check=True)
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            assert pool.apply(abs, (-1,)) == 1
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == dist.get_world_size()
    if os.environ.get("GLOO_EXIT_END") == "destroy":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
