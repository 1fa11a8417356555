"""What decides whether libibverbs marks memory DONTFORK on this machine.

One named constant per fact, with where it comes from.  The doctor's wording
(:mod:`.protection`) asks these functions; nothing else knows the versions.
"""

from __future__ import annotations

import os
import platform
import re

__all__ = ["COPY_ON_FORK_KERNEL", "ENGINE_MODULE", "ENV_VARS", "RDMA_CORE_SKIPS_MARKING",
           "RDMA_LIBS", "kernel_copies_pinned_pages", "rdma_core_version", "ucx_fork_settings"]

#: First Linux release that reports over RDMA netlink that it copies
#: DMA-pinned pages into the child at fork() (RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK,
#: kernel commit "RDMA/nldev: Add copy-on-fork attribute to get sys command",
#: Linux 5.13).
COPY_ON_FORK_KERNEL = (5, 13)

#: First rdma-core release whose ibv_fork_init() does nothing where the kernel
#: said it copies pinned pages, so no registration is marked DONTFORK
#: (rdma-core commit 5a11b68, "libibverbs: ignore IBV_FORK_SAFE et.al. when
#: kernel has fork support", v51.0). Releases 35-50 ask the kernel (commit
#: 67b00c3), report "unneeded" and mark all the same.
RDMA_CORE_SKIPS_MARKING = 51

#: libibverbs' file name carries its rdma-core release:
#: libibverbs.so.1.<ABI minor>.<rdma-core major>.0 (libibverbs.so.1.14.44.0
#: is rdma-core 44; rdma-core's libibverbs/CMakeLists.txt sets the version).
_VERBS_FILE = re.compile(r"libibverbs\.so\.1\.\d+\.(\d+)\.\d+$")

#: The C core's module; mapped in a process that imported rdmaspawn's engine.
ENGINE_MODULE = "_rdmaspawn_cffi"

#: Libraries worth naming when they are mapped: they call ibv_fork_init() or
#: register memory.  (file-name prefix, name shown)
RDMA_LIBS = (
    ("libibverbs.so", "libibverbs"),
    ("libfabric.so", "libfabric"),
    ("libuct_ib", "UCX (uct_ib)"),
    ("libucs.so", "UCX (ucs)"),
    ("libuct.so", "UCX (uct)"),
    ("libnccl", "NCCL"),
    ("libefa", "EFA verbs provider"),
    ("libmlx5", "mlx5 verbs provider"),
)

#: What each variable that changes fork behaviour does.  Sources: the
#: ibv_fork_init(3) and ibv_is_fork_initialized(3) man pages and
#: libibverbs/memory.c (rdma-core), libfabric's EFA provider (prov/efa, fork
#: support), UCX's uct_ib_md config.
ENV_VARS: dict[str, str] = {
    "RDMAV_FORK_SAFE": (
        "set to any value (even empty or 0): libibverbs calls ibv_fork_init() when it "
        "initialises, so every registered buffer is marked MADV_DONTFORK, rounded out to "
        "whole pages; a fork() child loses those pages. No effect where libibverbs learns "
        "that the kernel copies pinned pages on fork (fork status 'unneeded') and is of rdma-core 51 or later"
    ),
    "IBV_FORK_SAFE": "older name of RDMAV_FORK_SAFE, same effect",
    "RDMAV_HUGEPAGES_SAFE": (
        "set to any value: with fork support on, libibverbs finds the real page size of "
        "each registered range, so on huge pages the MADV_DONTFORK area grows to whole "
        "huge pages; extra cost per registration"
    ),
    "FI_EFA_FORK_SAFE": (
        "libfabric EFA provider: 1 turns on libibverbs fork support (ibv_fork_init(), "
        "MADV_DONTFORK on registrations) and stops using huge pages for bounce buffers; "
        "unset or 0 on a kernel without copy-on-fork makes recent libfabric abort the "
        "process at fork() with a fork-safety message"
    ),
    "UCX_IB_FORK_INIT": (
        "UCX IB transports: 'try' (default) calls ibv_fork_init() and carries on if it "
        "fails, 'yes' calls it and fails without it, 'no' never calls it"
    ),
    "UCX_IB_RCACHE_PURGE_ON_FORK": (
        "UCX IB registration cache: 'y' (the default, else UCX_RCACHE_PURGE_ON_FORK's "
        "value) deregisters the cached user buffers in an at-fork handler, which un-marks "
        "them (MADV_DOFORK) before every fork(); UCX's own pools stay registered and marked"
    ),
    "UCX_RCACHE_PURGE_ON_FORK": (
        "UCX, every registration cache: the default of UCX_IB_RCACHE_PURGE_ON_FORK; 'n' keeps "
        "cached user buffers marked across fork()"
    ),
    "RDMAV_USE_MADVISE": (
        "set: libibverbs (rdma-core 51+) marks registrations MADV_DONTFORK even where the "
        "kernel copies pinned pages at fork, and rdmaspawn's fork repair stays off"
    ),
}


#: UCX's names for "yes" and "no" in a boolean setting (ucs_config_sscanf_bool).
_UCX_YES = ("y", "yes", "on", "1")
_UCX_NO = ("n", "no", "off", "0")


def ucx_fork_settings(env: dict[str, str | None], libraries: dict[str, str],
                      known: bool = True) -> dict[str, object]:
    """What UCX does at fork() in a process: its settings (``env``; ``known`` false where
    unreadable) and whether it is loaded (``libraries``). Defaults are UCX 1.13's
    (``ucx_info -c -f``): ``UCX_IB_FORK_INIT=try``, ``UCX_IB_RCACHE_PURGE_ON_FORK=y``."""
    loaded = any(name.startswith("UCX") for name in libraries)
    fork_init = env.get("UCX_IB_FORK_INIT")
    purge_var = next((k for k in ("UCX_IB_RCACHE_PURGE_ON_FORK", "UCX_RCACHE_PURGE_ON_FORK")
                      if env.get(k) is not None), None)
    purge_value = (env.get(purge_var) or "") if purge_var else "y"
    purge: bool | None = (None if not known else True if purge_value.lower() in _UCX_YES
                          else False if purge_value.lower() in _UCX_NO else None)
    marks = fork_init is None or fork_init.lower() != "no"
    if not loaded:
        note = "UCX is not loaded"
    elif not known:
        note = ("UCX is loaded; its fork settings cannot be read (environment unreadable): "
                "whether it un-marks its cached buffers at fork() is unknown")
    elif not marks:
        note = ("UCX_IB_FORK_INIT=no: UCX does not call ibv_fork_init(), so it marks nothing "
                "unless fork protection is on by other means (RDMAV_FORK_SAFE, NCCL)")
    elif purge:
        note = ("UCX purges its registration cache at every fork() (UCX_IB_RCACHE_PURGE_ON_FORK"
                f"={'y, the default' if purge_var is None else purge_value}): its at-fork "
                "handler deregisters the cached user buffers, un-marking them (MADV_DOFORK), "
                "so those marks do not reach a fork() child; UCX's own pools stay marked, so "
                "marked memory listed here may still be UCX's and still a hazard")
    elif purge is False:
        note = (f"{purge_var}={purge_value}: UCX keeps its cached user buffers registered and "
                "marked across fork(): a fork() child lacks them, and one that borders "
                "malloc's memory crashes the child")
    else:
        note = f"{purge_var}={purge_value!r} is not a value UCX accepts (y or n)"
    return {"loaded": loaded, "fork_init": fork_init or "try (default)",
            "marks": loaded and marks, "purge_on_fork": purge,
            "purge_setting": purge_var or "default", "note": note}


def kernel_copies_pinned_pages(release: str | None = None) -> bool | None:
    """Whether the kernel (or ``release``) is one that copies DMA-pinned pages at fork
    and says so; None if its version is unreadable."""
    m = re.match(r"(\d+)\.(\d+)", platform.release() if release is None else release)
    return None if m is None else (int(m.group(1)), int(m.group(2))) >= COPY_ON_FORK_KERNEL


def rdma_core_version(verbs_path: str | None) -> int | None:
    """The rdma-core release of a libibverbs file (symlinks resolved), else None."""
    if not verbs_path:
        return None
    m = _VERBS_FILE.search(os.path.realpath(verbs_path))
    return int(m.group(1)) if m else None
