"""``repaircost --real`` and ``--vmas``: the fork repair against real registrations.

It shows only with memory really registered (``ibv_reg_mr()`` through ctypes,
``RDMAV_FORK_SAFE=1``), so it needs an RDMA device; docs/real-device-tests.md
says what each variant and ``--placement`` is, and how bench_vm.sh runs them.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
from typing import Any

from rdmaspawn._host.interpreter import python_command

from .numbers import log
from .workers import Worker, take_turns

VARIANTS = ("marked", "repaired", "unmarked", "swept", "loaded")
DEFAULT_VARIANTS = VARIANTS[:3]
REPAIRING = ("repaired", "swept")  # the columns a kernel that refuses has none of
MIB = 1 << 20

# What both workers share: libibverbs through ctypes, the device's first
# protection domain, the /proc readers (not forkshape.py's: its mmap import
# would map one more library into the fork it times). RDMAV_FORK_SAFE is set
# by the parent, before libibverbs is loaded (its constructor reads it).
VERBS = r"""
import ctypes, json, os, sys, time
vp, sz = ctypes.c_void_p, ctypes.c_size_t
verbs = ctypes.CDLL("libibverbs.so.1", use_errno=True)
for name, res, args in (("ibv_get_device_list", ctypes.POINTER(vp), [ctypes.POINTER(ctypes.c_int)]),
                        ("ibv_get_device_name", ctypes.c_char_p, [vp]),
                        ("ibv_open_device", vp, [vp]), ("ibv_alloc_pd", vp, [vp]),
                        ("ibv_reg_mr", vp, [vp, vp, sz, ctypes.c_int]),
                        ("ibv_dereg_mr", ctypes.c_int, [vp])):
    getattr(verbs, name).restype, getattr(verbs, name).argtypes = res, args
libc = ctypes.CDLL(None, use_errno=True)
PAGE = os.sysconf("SC_PAGESIZE")
libc.mmap.restype, libc.mmap.argtypes = vp, [vp, sz, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [vp, sz, ctypes.c_int]
libc.mprotect.argtypes = [vp, sz, ctypes.c_int]
libc.malloc.restype, libc.malloc.argtypes = vp, [sz]
libc.free.argtypes = [vp]
n = ctypes.c_int(0)
devices = verbs.ibv_get_device_list(ctypes.byref(n))
names = [verbs.ibv_get_device_name(devices[i]).decode() for i in range(n.value)]
if not names:
    sys.exit("no RDMA device (ibv_get_device_list)")
want = os.environ.get("RDMASPAWN_BENCH_DEVICE", "rxe0")
device = names.index(want) if want in names else 0
context = verbs.ibv_open_device(devices[device])
pd = verbs.ibv_alloc_pd(context) if context else None
if not pd:
    sys.exit(f"cannot open {names[device]} or allocate its PD: {os.strerror(ctypes.get_errno())}")
def register(address, length):
    mr = verbs.ibv_reg_mr(pd, address, length, 1)  # IBV_ACCESS_LOCAL_WRITE
    if not mr:
        sys.exit(f"ibv_reg_mr({length}): {os.strerror(ctypes.get_errno())}")
    return mr
def mappings():
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")
def dc_bytes(lo, hi):
    # Bytes of [lo, hi) in mappings smaps flags dc (MADV_DONTFORK).
    total = start = end = 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
            elif head == "VmFlags:" and " dc" in line:
                total += max(0, min(end, hi) - max(start, lo))
    return total
def borders(address):
    # The mappings that touch the one holding address: whether the sweep may
    # count a neighbour as feeding it (csrc/unmark.c), in the JSON line.
    rows = []
    with open("/proc/self/maps") as f:
        for line in f:
            head = line.split()
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            rows.append((lo, hi, head[1], head[5] if len(head) > 5 else ""))
    for i, (lo, hi, _, _) in enumerate(rows):
        if lo <= address < hi:
            return [f"{p} {n or '(anonymous)'}" for j, (a, b, p, n) in enumerate(rows)
                    if (j == i - 1 and b == lo) or (j == i + 1 and a == hi)]
    return []
def repair():
    from rdmaspawn import repair_fork
    r = repair_fork()
    return {"active": r.active, "reason": r.reason}
"""

# One fork worker: registers its size, says what is marked, then answers each
# line on stdin with one fork's milliseconds and the child's VmRSS.
FORKS = VERBS + r"""
variant, size, placement = sys.argv[1], int(sys.argv[2]), sys.argv[3]
state = {"variant": variant, "device": names[device], "size": size}
if variant == "repaired":
    state.update(repair())
elif variant == "loaded":
    import rdmaspawn
    from rdmaspawn._rdmaspawn_cffi import lib
address = 0
if size:
    if placement == "malloc":  # glibc maps it: its header shares the first page
        address = libc.malloc(size)
    elif placement == "lone":  # between two PROT_NONE guard pages: no neighbour feeds it
        base = libc.mmap(None, size + 2 * PAGE, 0, 0x22, -1, 0)
        failed = base in (None, ctypes.c_void_p(-1).value)
        address = None if failed or libc.mprotect(base + PAGE, size, 3) else base + PAGE
    else:
        address = libc.mmap(None, size, 3, 0x22, -1, 0)  # RW, MAP_PRIVATE | MAP_ANONYMOUS
    if address in (None, 0, ctypes.c_void_p(-1).value):
        sys.exit(f"{placement}({size}): {os.strerror(ctypes.get_errno())}")
    ctypes.memset(address, 0x5a, size)  # resident before it is pinned, as data would be
    register(address, size)
    # Whole pages, as libibverbs rounds its own mark (a malloc()ed block starts mid-page).
    lo, hi = address & -PAGE, -(-(address + size) // PAGE) * PAGE
    if variant == "unmarked" and libc.madvise(lo, hi - lo, 11) != 0:  # MADV_DOFORK
        sys.exit(f"madvise(MADV_DOFORK): {os.strerror(ctypes.get_errno())}")
if variant == "swept":
    state.update(repair())
state["dc"] = dc_bytes(address, address + size) if size else 0
state["borders"] = borders(address) if size else []
print(json.dumps(state), flush=True)
for line in sys.stdin:
    r, w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # raw calls only: the child's own allocations are not the subject
        fd = os.open("/proc/self/status", os.O_RDONLY)
        status = os.read(fd, 8192)
        os.write(w, status[status.index(b"VmRSS:"):].split(b"\n", 1)[0])
        os._exit(0)
    os.close(w)
    answer = os.read(r, 256)  # one write, under PIPE_BUF: whole
    os.waitpid(pid, 0)
    ms = (time.perf_counter() - start) * 1e3
    os.close(r)
    print(json.dumps({"ms": ms, "rss_kib": int(answer.split()[1])}), flush=True)
"""

# The mappings through register/deregister cycles: each cycle registers a
# small buffer (4-64 KiB, malloc()ed: it shares its pages with malloc's data)
# and, every LARGE_EVERY cycles, a large one; the WINDOW oldest stay
# registered, so that neighbours carry marks of different ages.
VMAS = VERBS + r"""
variant, cycles, large, large_every, window = sys.argv[1], *map(int, sys.argv[2:6])
out = {"variant": variant, "device": names[device]}
if variant == "repaired":
    out.update(repair())
def report(cycle):
    print(json.dumps({"cycle": cycle, "mappings": mappings()}), flush=True)
live = []
report(0)
start = time.perf_counter()
for i in range(1, cycles + 1):
    for length in [4096 * (1 + i % 16)] + ([large] if i % large_every == 0 else []):
        buf = libc.malloc(length)
        live.append((register(buf, length), buf))
    while len(live) > window:
        mr, buf = live.pop(0)
        if verbs.ibv_dereg_mr(mr) != 0:
            sys.exit(f"ibv_dereg_mr: {os.strerror(ctypes.get_errno())}")
        libc.free(buf)
    if i % 1000 == 0:
        report(i)
out["seconds"] = time.perf_counter() - start
out["mappings"] = mappings()
print(json.dumps(out), flush=True)
"""


def _environment() -> dict[str, str]:
    return {**os.environ, "RDMAV_FORK_SAFE": "1"}


def measure(size: int, rounds: int, variants: tuple[str, ...], placement: str) -> dict[str, Any]:
    """One size: each variant's state, fork milliseconds and child VmRSS (KiB) per round."""
    row: dict[str, Any] = {"size_mib": size / MIB, "variants": {}, "refused": None}
    workers: dict[str, Worker] = {}
    # One at a time: three registrations of a GiB being pinned at once
    # would only measure the machine's memory.
    for variant in variants:
        w = Worker(FORKS, variant, str(size), placement, env=_environment())
        if not w.first:  # its own message is on stderr already
            raise SystemExit(f"repaircost --real: the {variant} worker ({size} bytes) "
                             f"exited {w.close()}")
        state = json.loads(w.first)
        if variant in REPAIRING and not state["active"]:
            row["refused"] = state["reason"]
            w.close()
            continue
        workers[variant] = w
        row["variants"][variant] = {"dc_mib": state["dc"] / MIB, "device": state["device"],
                                    "borders": state["borders"]}
    # A line per size on stderr: the VM's watchdog (tests/vm_watchdog.sh)
    # takes a silent console for a hang, and a GiB's rounds are minutes of TCG.
    log(f"repaircost: {size // MIB} MiB registered in {', '.join(workers)}; {rounds} rounds")
    for variant, times in take_turns(workers, rounds).items():
        forks = [t["ms"] for t in times]
        row["variants"][variant] = {
            "fork_ms": statistics.median(forks),
            "child_rss_mib": statistics.median(t["rss_kib"] / 1024 for t in times),
            **row["variants"][variant], "forks_ms": forks}
    return row


def _cell(row: dict[str, Any], variant: str, key: str, fmt: str) -> str:
    v = row["variants"].get(variant)
    if v is None:
        return "refused" if variant in REPAIRING else "-"
    return format(v[key], fmt)


def render(rows: list[dict[str, Any]], variants: tuple[str, ...]) -> list[str]:
    ratios = [k for k in (*REPAIRING, "loaded") if k in variants and "marked" in variants]
    lines = ["| registered | " + " | ".join(f"{k} fork" for k in variants)
             + "".join(f" | {k} / marked" for k in ratios)
             + " | child RSS " + " | ".join(variants)
             + " | dc MiB " + " / ".join(variants) + " |",
             "|---:" * (1 + 2 * len(variants) + len(ratios) + 1) + "|"]
    for row in rows:
        v = row["variants"]
        cells = [f"{row['size_mib']:.0f} MiB"]
        cells += [_cell(row, k, "fork_ms", ".2f") + " ms" * (k in v) for k in variants]
        cells += [f"{v[k]['fork_ms'] / v['marked']['fork_ms']:.2f}x" if k in v else "-"
                  for k in ratios]
        cells += [_cell(row, k, "child_rss_mib", ".0f") + " MiB" * (k in v) for k in variants]
        cells.append(" / ".join(_cell(row, k, "dc_mib", ".0f") for k in variants))
        lines.append("| " + " | ".join(cells) + " |")
    refused = {row["refused"] for row in rows if row["refused"]}
    lines += [f"\nrepair_fork() refused: {why}" for why in sorted(refused)]
    return lines


def run_forks(sizes_mib: list[int], rounds: int, variants: tuple[str, ...] = DEFAULT_VARIANTS,
              placement: str = "mmap") -> tuple[list[str], dict[str, Any]]:
    """The table's lines and the run as one JSON-ready dict."""
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"repaircost --real: no variant {', '.join(sorted(unknown))}")
    rows = [measure(s * MIB, rounds, variants, placement) for s in sizes_mib]
    summary = {"bench": "repaircost-real", "kernel": platform.release(),
               "python": platform.python_version(), "rounds": rounds,
               "variants": list(variants), "placement": placement, "rows": rows}
    return render(rows, variants), summary


def run_vmas(cycles: int, large_mib: int, large_every: int, window: int) -> dict[str, Any]:
    """Each variant's mappings at the start, every 1,000 cycles and at the end."""
    result: dict[str, Any] = {"bench": "repaircost-vmas", "kernel": platform.release(),
                              "cycles": cycles, "large_mib": large_mib,
                              "large_every": large_every, "window": window, "variants": {}}
    for variant in ("stock", "repaired"):
        log(f"repaircost: --vmas: {cycles} cycles, {variant}")
        proc = subprocess.run(
            python_command(VMAS, variant, str(cycles), str(large_mib * MIB), str(large_every),
                           str(window)),
            stdout=subprocess.PIPE, text=True, env=_environment())
        if proc.returncode != 0:  # its own message is on stderr already
            raise SystemExit(f"repaircost --vmas: the {variant} worker exited {proc.returncode}")
        lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
        end = lines[-1]
        end["counts"] = [(x["cycle"], x["mappings"]) for x in lines[:-1]]
        result["variants"][variant] = end
    return result


def render_vmas(result: dict[str, Any]) -> list[str]:
    stock, repaired = result["variants"]["stock"], result["variants"]["repaired"]
    # Where repair_fork() refused (5.10) the column is a process that asked.
    name = "repaired" if repaired.get("active") else "repair_fork() refused"
    lines = [f"mappings (lines of /proc/self/maps) over {result['cycles']:,} register/deregister "
             f"cycles on {stock['device']}: a 4-64 KiB malloc() each cycle, "
             f"{result['large_mib']} MiB every {result['large_every']}, "
             f"the {result['window']} newest kept registered",
             "", f"| cycle | stock | {name} |", "|---:|---:|---:|"]
    for (cycle, a), (_, b) in zip(stock["counts"], repaired["counts"]):
        lines.append(f"| {cycle:,} | {a} | {b} |")
    lines.append(f"| end | {stock['mappings']} | {repaired['mappings']} |")
    lines.append(f"\nseconds: stock {stock['seconds']:.1f}, repaired {repaired['seconds']:.1f}; "
                 f"repair: {repaired.get('reason', '?')}")
    return lines
