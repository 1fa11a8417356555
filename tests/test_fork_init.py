"""fork_init() and fork_status() against the real libibverbs, and against a
stand-in with rdma-core 33's bookkeeping (Debian 11's release, which has no
ibv_is_fork_initialized(): the state cannot be read there, "unknown").

Each test runs in a fresh interpreter: ibv_fork_init() cannot be undone.
"""
from __future__ import annotations

import os

import pytest
from helpers import standin_verbs
from helpers.child import run_json
from helpers.hazard import require_verbs, verbs_answers_fork_state


@pytest.fixture(params=["system", "rdma-core 33"])
def verbs_env(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str] | None, str]:
    """The child's environment, and what fork_status() says before anything ran:
    "disabled" where the library answers, "unknown" where it cannot (before 35)."""
    if request.param == "system":
        require_verbs()
        return None, "disabled" if verbs_answers_fork_state() else "unknown"
    lib = standin_verbs.build(tmp_path_factory, standin_verbs.RDMA_CORE_33)
    return dict(os.environ, LD_LIBRARY_PATH=str(lib.parent)), "unknown"


def test_status_then_init_is_idempotent(verbs_env):
    """disabled (unknown: 33) -> enabled, and calling fork_init() again changes nothing."""
    env, untouched = verbs_env
    out = run_json("""
        import json, rdmaspawn
        before = rdmaspawn.fork_status()
        first = rdmaspawn.fork_init()
        second = rdmaspawn.fork_init()
        print(json.dumps([before, first, second, rdmaspawn.fork_status()]))
    """, env=env)
    before, first, second, after = out
    assert before[0] == untouched
    assert "libibverbs" in before[1]
    assert first[0] == second[0] == after[0] == "enabled"
    assert first[1] == before[1]


def test_same_instance_as_the_process_loaded(verbs_env):
    """A libibverbs that someone else loaded and initialised is the one asked:
    "enabled"; where the library cannot say (33) and nothing is marked yet,
    "unknown", never "disabled" (issue 48, item 5); then fork_init() finds
    it on."""
    env, untouched = verbs_env
    out = run_json("""
        import ctypes, json, rdmaspawn
        verbs = ctypes.CDLL("libibverbs.so.1")
        assert verbs.ibv_fork_init() == 0
        print(json.dumps([rdmaspawn.fork_status(), rdmaspawn.fork_init()]))
    """, env=env)
    status, init = out
    assert status[0] == ("enabled" if untouched == "disabled" else "unknown")
    assert init[0] == "enabled"


def test_registered_before_init_is_a_clear_error(verbs_env):
    """Memory marked before fork_init(): EINVAL, explained, status "disabled"
    (on 33 too: a refused ibv_fork_init() there is final)."""
    env, _ = verbs_env
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
    """, env=env)
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
