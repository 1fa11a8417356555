"""A child of a long soft-RoCE test, its progress lines shown as they come.

The VM's watchdog (tests/vm_watchdog.sh) takes a silent console for a hang:
a child that runs for minutes (an mpirun, a torch DataLoader) prints a line
as each of its steps ends, and the test passes them on (conftest's
``progress``) while it keeps the whole output for its asserts.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
from typing import Callable

#: Seconds before a child is killed: a bound on a hang, far above a slow VM's
#: minutes.
LIMIT = 900


def run_streamed(argv: list[str], env: dict[str, str], say: Callable[[str], None],
                 marker: str, label: str) -> tuple[int, str, str]:
    """Run ``argv``; each stdout line that starts with ``marker`` goes to
    ``say`` with ``label`` in front.  Returns (returncode, stdout, stderr)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        timer = threading.Timer(LIMIT, proc.kill)
        timer.start()
        out = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.append(line)
                if line.startswith(marker):
                    say(f"  {label}: {line.rstrip()}")
            returncode = proc.wait()
        finally:
            timer.cancel()
            if proc.stdout is not None:
                proc.stdout.close()
        err.seek(0)
        return returncode, "".join(out), err.read()
