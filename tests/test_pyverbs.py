"""Integration with the real pyverbs (rdma-core's Python bindings).

pyverbs links the system libibverbs.so.1; rdmaspawn must see the very
instance pyverbs initialised, and explain when memory was registered before
fork support was turned on. Fresh interpreters: none of this can be undone.
"""
from __future__ import annotations

from helpers.child import run_json
from helpers.hazard import require_pyverbs


def test_fork_status_after_pyverbs_fork_init():
    """After pyverbs.fork.fork_init(), fork_status() says enabled, same library."""
    require_pyverbs()
    before, after, pyverbs_state, lib, maps = run_json("""
        import json, pyverbs.fork, rdmaspawn
        before = rdmaspawn.fork_status()
        pyverbs.fork.fork_init()
        after = rdmaspawn.fork_status()
        with open("/proc/self/maps") as f:
            maps = sorted({line.split()[-1] for line in f if "libibverbs" in line})
        print(json.dumps([before.state, after.state, int(pyverbs.fork.is_fork_initialized()),
                          after.library, maps]))
    """)
    assert before == "disabled"
    assert after == "enabled"
    assert pyverbs_state == 1  # IBV_FORK_ENABLED, as pyverbs itself reads it
    # One libibverbs in the process, and it is the one rdmaspawn asked.
    assert len(maps) == 1
    import os

    assert os.path.realpath(lib) == os.path.realpath(maps[0])


def test_fork_init_after_registration_is_a_clear_error():
    """Memory marked through pyverbs' libibverbs first: ForkInitError, with the fix."""
    require_pyverbs()
    err, message, pyverbs_err = run_json("""
        import ctypes, json, mmap, pyverbs.fork, rdmaspawn
        # The libibverbs pyverbs loaded; ibv_reg_mr() would call this on a device.
        verbs = ctypes.CDLL(rdmaspawn.fork_status().library)
        buf = mmap.mmap(-1, 4096)
        verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        assert verbs.ibv_dontfork_range(ctypes.addressof(ctypes.c_char.from_buffer(buf)), 4096) == 0
        try:
            rdmaspawn.fork_init()
            out = [0, "no error"]
        except rdmaspawn.ForkInitError as exc:
            out = [exc.errno, str(exc)]
        try:
            pyverbs.fork.fork_init()
            out.append("no error")
        except Exception as exc:
            out.append(type(exc).__name__)
        print(json.dumps(out))
    """)
    assert err == 22
    assert "already registered" in message and "RDMAV_FORK_SAFE" in message
    assert pyverbs_err != "no error"  # pyverbs agrees: it is too late
