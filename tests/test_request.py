"""_native/request.py: SpawnRequest, the one list of a spawn's fields."""
from __future__ import annotations

import inspect

from rdmaspawn._native import engine
from rdmaspawn._native.request import SpawnRequest


def test_spawn_defaults_are_the_requests() -> None:
    """engine.spawn() spells its keywords out for its callers (and for mypy);
    each that is a field of SpawnRequest defaults to the request's default, so
    that spawn(argv, exe) and SpawnRequest(argv, exe) start the same child."""
    params = inspect.signature(engine.spawn).parameters
    # close_method: spawn() takes its name, the request the C value (see below).
    shared = [name for name in SpawnRequest._field_defaults
              if name in params and name != "close_method"]
    assert len(shared) > 10, shared
    for name in shared:
        assert params[name].default == SpawnRequest._field_defaults[name], name


def test_the_default_flags_are_spawns() -> None:
    """SpawnRequest's default flags are what spawn()'s boolean defaults combine to."""
    p = inspect.signature(engine.spawn).parameters
    want = ((p["close_fds"].default and engine.CLOSE_FDS)
            | (p["restore_signals"].default and engine.RESTORE_SIGNALS)
            | (p["setsid"].default and engine.SETSID)
            | (p["want_pidfd"].default and engine.WANT_PIDFD)
            | (p["reap_on_failure"].default and engine.REAP_ON_FAILURE)
            | (p["force_clone"].default and engine.FORCE_CLONE))
    assert SpawnRequest._field_defaults["flags"] == want
    assert (engine._CLOSE_METHODS[p["close_method"].default]
            == SpawnRequest._field_defaults["close_method"])
