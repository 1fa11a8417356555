"""Count torchrun jobs in which a rank aborts at exit, with and without rdmaspawn.

    python tests/torch_job/measure_exit_aborts.py [--runs 40] [--parallel 2] [--spawn]
        [--destroy] [--variant VALUE ...]

Runs ``torchrun --standalone --nproc-per-node 2 gloo_exit.py`` ``--runs``
times for each variant, interleaved (so machine load hits all alike),
``--parallel`` jobs at a time. A variant is an ``RDMASPAWN`` value for the
whole job: ``off`` is the plain job, ``run`` is ``rdmaspawn run -- torchrun
...`` itself (which sets ``patch,guard=raise,repair,start_method=forkserver``), and
any other value (``patch``, ``guard=raise``, ...) is set in the environment,
to tell which part of rdmaspawn matters. Default: ``off run``. A job counts
as aborted when its output says "terminate called" (std::terminate in a
rank) or it exits non-zero. Prints one line per variant:
``VARIANT: A of N aborted (terminate called: T, non-zero exit: E)`` and keeps
every aborted job's output under ``--keep`` for reading. Not a test: a
measurement for the report (timings and rates never decide a test here).

What the abort is (a core of one, under gdb): gloo's worker thread
(``ProcessGroupGloo::runLoop``) destroys the finished all-reduce work, whose
tensors are held by Python objects, so it takes the GIL
(``TensorImpl::decref_pyobject``); when the main thread has meanwhile begun
``Py_FinalizeEx``, ``take_gil`` ends the thread with ``pthread_exit``, whose
forced unwind meets a ``noexcept`` destructor: ``std::terminate``. No
rdmaspawn frame takes part; ``--destroy`` (destroy_process_group() before
exit) closes the window. Known upstream: pytorch/pytorch#190489.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = sysconfig.get_path("scripts")


def one_job(variant: str, index: int, spawn: bool, end: str,
            keep: str) -> tuple[str, bool, bool]:
    cmd = [os.path.join(SCRIPTS, "torchrun"), "--standalone", "--nproc-per-node", "2",
           os.path.join(HERE, "gloo_exit.py")]
    env = dict(os.environ, GLOO_EXIT_SPAWN="1" if spawn else "0", GLOO_EXIT_END=end)
    env.pop("RDMASPAWN", None)
    if variant == "run":
        cmd = [os.path.join(SCRIPTS, "rdmaspawn"), "run", "--", *cmd]
    else:
        env["RDMASPAWN"] = variant
    res = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=300, check=False)
    out = res.stdout + res.stderr
    terminate = "terminate called" in out
    failed = res.returncode != 0
    if terminate or failed:
        name = f"{variant.replace(',', '+')}-{index}.log"
        with open(os.path.join(keep, name), "w") as f:
            f.write(f"$ {' '.join(cmd)}\nexit {res.returncode}\n{out}")
    return variant, terminate, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--spawn", action="store_true", help="each rank starts one child")
    parser.add_argument("--destroy", action="store_true",
                        help="each rank calls destroy_process_group() before it exits")
    parser.add_argument("--keep", default="exit-aborts")
    parser.add_argument("--variant", action="append", dest="variants")
    ns = parser.parse_args()
    os.makedirs(ns.keep, exist_ok=True)
    variants = ns.variants or ["off", "run"]
    jobs = [(v, i) for i in range(ns.runs) for v in variants]
    counts = {v: [0, 0, 0] for v in variants}  # aborted, terminate, non-zero
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(ns.parallel) as pool:
        futures = [pool.submit(one_job, v, i, ns.spawn,
                               "destroy" if ns.destroy else "exit", ns.keep) for v, i in jobs]
        for fut in concurrent.futures.as_completed(futures):
            variant, terminate, failed = fut.result()
            c = counts[variant]
            c[0] += terminate or failed
            c[1] += terminate
            c[2] += failed
    for v in variants:
        a, t, e = counts[v]
        print(f"{v}: {a} of {ns.runs} aborted (terminate called: {t}, non-zero exit: {e})")
    print(f"{len(jobs)} jobs in {time.monotonic() - started:.0f}s, {ns.parallel} at a time,"
          f" spawn={ns.spawn}, destroy={ns.destroy}; aborted jobs' output in {ns.keep}/",
          file=sys.stderr)


if __name__ == "__main__":
    main()
