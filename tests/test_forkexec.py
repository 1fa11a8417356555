"""rdmaspawn's fork_exec called directly, as CPython's _execute_child and
multiprocessing call it: its contract about the failed child's pid."""
from __future__ import annotations

import os
import threading

from process_state import children

from rdmaspawn import _cpython
from rdmaspawn.dropin.forkexec import fork_exec


def _call(errpipe_read: int, errpipe_write: int, **named: object) -> tuple:
    """A positional fork_exec call of this CPython, built by name."""
    base = dict(
        args=[b"x"], executable_list=[b"/nonexistent/rdmaspawn"], close_fds=True,
        fds_to_keep=(errpipe_write,), cwd=None, env_list=None,
        p2cread=-1, p2cwrite=-1, c2pread=-1, c2pwrite=-1, errread=-1, errwrite=-1,
        errpipe_read=errpipe_read, errpipe_write=errpipe_write, restore_signals=True,
        call_setsid=False, pgid_to_set=-1, gid=None, extra_groups=None, uid=None,
        child_umask=-1, preexec_fn=None, allow_vfork=True)
    base.update(named)
    return tuple(base[name] for name in _cpython.require().params)


def test_failed_child_pid_survives_a_closed_error_pipe():
    """When the error pipe's reader is gone (BrokenPipeError on the report),
    fork_exec still returns the failed child's pid, as CPython's does, so the
    caller can reap it: no zombie nobody knows about."""
    kids = children()
    r, w = os.pipe()
    os.close(r)
    try:
        pid = fork_exec(*_call(r, w))
    finally:
        os.close(w)
    assert isinstance(pid, int) and pid > 0
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 255
    assert children() == kids


def test_no_lost_children_from_many_threads():
    """32 threads, each failing spawns with a closed error pipe: every pid comes
    back, and once each is reaped no child is left."""
    kids = children()
    pids: list = []
    errors: list = []

    def work():
        for _ in range(10):
            r, w = os.pipe()
            os.close(r)
            try:
                pids.append(fork_exec(*_call(r, w)))
            except BaseException as exc:
                errors.append(exc)
            finally:
                os.close(w)

    threads = [threading.Thread(target=work) for _ in range(32)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for pid in pids:
        os.waitpid(pid, 0)
    assert errors == []
    assert len(pids) == 320
    assert children() == kids


def test_wrong_argument_count_is_a_type_error():
    """A call with the argument count of another CPython is refused, never routed."""
    import pytest

    args = _call(-1, 5)
    with pytest.raises(TypeError, match=f"exactly {len(args)} arguments"):
        fork_exec(*args[:-1])
