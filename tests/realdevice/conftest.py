"""What the soft-RoCE VM's long tests share: a printer onto the console."""

from __future__ import annotations

import pytest


@pytest.fixture
def progress(capsys):
    """A printer past pytest's capture, onto the VM's console.  The lane's
    watchdog (tests/vm_watchdog.sh) calls a VM hung when its console has
    printed nothing while qemu got RDMASPAWN_VM_SILENCE seconds of CPU; a
    test whose child runs for minutes prints the child's steps as they end."""
    def say(line: str) -> None:
        with capsys.disabled():
            print(line, flush=True)
    return say
