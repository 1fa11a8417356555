"""Exec argv[1:] with every signal at its default disposition and none blocked.

The entry point of .ci/lanes/sid.sh's chroot. A shell that runs a job in the
background hands its children SIGINT and SIGQUIT ignored, and an ignored
signal stays ignored across exec: the interrupt tests then see no
KeyboardInterrupt and fail although nothing is wrong.
"""
import os
import signal
import sys

for signum in range(1, signal.NSIG):
    if signum in (signal.SIGKILL, signal.SIGSTOP):
        continue
    try:
        signal.signal(signum, signal.SIG_DFL)
    except (OSError, ValueError):  # the real-time signals glibc keeps for itself
        pass
signal.pthread_sigmask(signal.SIG_SETMASK, [])
os.execv(sys.argv[1], sys.argv[1:])
