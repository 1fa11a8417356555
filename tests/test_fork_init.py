"""fork_init() and fork_status() against the real libibverbs.

Each test runs in a fresh interpreter: ibv_fork_init() cannot be undone.
"""
from __future__ import annotations

from helpers.child import run_json
from helpers.hazard import require_verbs


def test_status_then_init_is_idempotent():
    """disabled -> enabled, and calling fork_init() again changes nothing."""
    require_verbs()
    out = run_json("""
        import json, rdmaspawn
        before = rdmaspawn.fork_status()
        first = rdmaspawn.fork_init()
        second = rdmaspawn.fork_init()
        print(json.dumps([before, first, second, rdmaspawn.fork_status()]))
    """)
    before, first, second, after = out
    assert before[0] == "disabled"
    assert "libibverbs" in before[1]
    assert first[0] == second[0] == after[0] == "enabled"
    assert first[1] == before[1]


def test_same_instance_as_the_process_loaded():
    """A libibverbs that someone else loaded and initialised is the one asked."""
    require_verbs()
    out = run_json("""
        import ctypes, json, rdmaspawn
        verbs = ctypes.CDLL("libibverbs.so.1")
        assert verbs.ibv_fork_init() == 0
        print(json.dumps(rdmaspawn.fork_status()))
    """)
    assert out[0] == "enabled"


def test_registered_before_init_is_a_clear_error():
    """Memory marked before fork_init(): EINVAL, explained, status unchanged."""
    require_verbs()
    out = run_json("""
        import ctypes, errno, json, mmap, rdmaspawn
        verbs = ctypes.CDLL("libibverbs.so.1")
        buf = mmap.mmap(-1, 4096)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        verbs.ibv_dontfork_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        assert verbs.ibv_dontfork_range(addr, 4096) == 0
        try:
            rdmaspawn.fork_init()
            print(json.dumps(["no error"]))
        except rdmaspawn.ForkInitError as exc:
            print(json.dumps([exc.errno, str(exc), rdmaspawn.fork_status()[0]]))
    """)
    err, message, state = out
    assert err == 22
    assert "already registered" in message and "before" in message
    assert state == "disabled"


def test_environment_turns_it_on():
    """RDMAV_FORK_SAFE=1: libibverbs enables fork support at its own init."""
    require_verbs()
    import os

    env = dict(os.environ, RDMAV_FORK_SAFE="1")
    out = run_json("""
        import ctypes, json, rdmaspawn
        verbs = ctypes.CDLL("libibverbs.so.1")
        verbs.ibv_get_device_list.restype = ctypes.c_void_p
        n = ctypes.c_int()
        lst = verbs.ibv_get_device_list(ctypes.byref(n))
        print(json.dumps(rdmaspawn.fork_status()))
    """, env=env)
    assert out[0] == "enabled"
