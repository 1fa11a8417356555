"""rdmaspawn.bench.machine: the benchmark's own reading of the machine's memory and CPU."""
from __future__ import annotations

import os

from rdmaspawn.bench.machine import cpu_model, meminfo


def test_meminfo_total_is_the_kernels_count_of_ram_in_bytes() -> None:
    """MemTotal, scaled from kB, is the physical memory sysconf reports (both are
    the kernel's totalram_pages), so a unit mistake would be off by 1024."""
    total = meminfo()["MemTotal"]
    assert total == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < meminfo()["MemAvailable"] <= total


def test_cpu_model_is_a_line_of_cpuinfo() -> None:
    """The name comes from /proc/cpuinfo verbatim (stripped), or is None."""
    name = cpu_model()
    if name is not None:
        with open("/proc/cpuinfo") as f:
            assert name in f.read()


def test_the_record_names_the_measured_packages_directory() -> None:
    """The commit a record names is read from the rdmaspawn package's directory.
    From a checkout the benchmark's code is in benchmarks/, beside the package,
    so its parent's parent is the checkout's root, which holds no
    __init__.py: every record made from a checkout said "commit not recorded"."""
    from rdmaspawn.bench import machine

    assert (machine.PACKAGE_DIR / "__init__.py").is_file()
    assert (machine.PACKAGE_DIR / "_native").is_dir() and machine.PACKAGE_DIR.name == "rdmaspawn"
