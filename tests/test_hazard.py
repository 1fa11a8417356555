"""The DONTFORK hazard that rdmaspawn exists for is real, and plant() reproduces it.

Every planting happens in a child interpreter (see helpers.hazard): a process
carrying the hazard cannot fork() again, and pytest must stay able to.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import hazard as hazard_helpers
from helpers import standin_verbs
from helpers.hazard import HazardRun, require_pyverbs, require_verbs, run_with_hazard

FORK_ONCE = """
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    print(describe(os.waitpid(pid, 0)[1]))
"""

FORK_20_TIMES = """
    results = []
    for _ in range(20):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        results.append(describe(os.waitpid(pid, 0)[1]))
    print(",".join(sorted(set(results))))
"""

POSIX_SPAWN = """
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "print('child ran')"], dict(os.environ))
    print(describe(os.waitpid(pid, 0)[1]))
"""

IN_SMAPS = """
    from rdmaspawn._host.procfs import is_dontfork as _is_dontfork
    print(_is_dontfork(hazard.arena), _is_dontfork(hazard.start + hazard.length - 1))
"""

METHODS = ["verbs", "madvise"]


def _stdout(result: HazardRun) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_fork_works_without_the_hazard() -> None:
    """Control: the same fork() snippet in the same kind of child exits 0 when nothing is planted."""
    assert _stdout(run_with_hazard(FORK_ONCE, None)) == "exit 0"


@pytest.mark.parametrize("method", METHODS)
def test_fork_child_segfaults(method: str) -> None:
    """After plant(method), an os.fork() child dies with SIGSEGV before running any code."""
    assert _stdout(run_with_hazard(FORK_ONCE, method)) == "signal SIGSEGV"


@pytest.mark.parametrize("method", METHODS)
def test_fork_child_segfaults_every_time(method: str) -> None:
    """The hazard is deterministic: 20 forks in a row, 20 SIGSEGVs."""
    assert _stdout(run_with_hazard(FORK_20_TIMES, method)) == "signal SIGSEGV"


@pytest.mark.parametrize("method", METHODS)
def test_posix_spawn_child_runs(method: str) -> None:
    """A CLONE_VM child (glibc posix_spawn) shares the parent's memory and runs normally."""
    result = run_with_hazard(POSIX_SPAWN, method)
    assert _stdout(result) == "child ran\nexit 0"


@pytest.mark.parametrize("method", METHODS)
def test_arena_page_is_dontfork(method: str) -> None:
    """plant() leaves the malloc arena's page, and the whole marked range, flagged dc in smaps."""
    result = run_with_hazard(IN_SMAPS, method)
    assert _stdout(result) == "True True"
    hazard = result.hazard
    assert hazard is not None
    assert hazard["method"] == method
    assert hazard["start"] <= hazard["arena"] < hazard["start"] + hazard["length"]
    assert hazard["start"] % 4096 == 0 and hazard["length"] % 4096 == 0


def test_verbs_records_library_and_fork_state() -> None:
    """The verbs method goes through the system libibverbs, which reports fork support enabled."""
    hazard = run_with_hazard("", "verbs").hazard
    assert hazard is not None
    assert "libibverbs.so" in hazard["library"]
    # None where the library has no ibv_is_fork_initialized() (rdma-core < 35).
    answers = hazard_helpers.verbs_answers_fork_state()
    assert hazard["fork_state_before"] == ("disabled" if answers else None)
    assert hazard["fork_state_after"] == ("enabled" if answers else None)
    assert hazard["fallback"] is None


def test_auto_prefers_verbs() -> None:
    """plant("auto") uses libibverbs where it loads."""
    require_verbs()
    hazard = run_with_hazard("", "auto").hazard
    assert hazard is not None
    assert hazard["method"] == "verbs"


@pytest.fixture(scope="module")
def rdma_core_33(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A libibverbs with rdma-core 33's bookkeeping and no ibv_is_fork_initialized()."""
    return standin_verbs.build(tmp_path_factory, standin_verbs.RDMA_CORE_33)


@pytest.mark.parametrize("method", ["auto", "verbs"])
def test_plants_through_a_libibverbs_without_is_fork_initialized(
        method: str, rdma_core_33: Path) -> None:
    """rdma-core 33 (Debian 11) has no ibv_is_fork_initialized(): plant() goes
    through it all the same, and says it could not ask (issue 48, item 1)."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(rdma_core_33.parent))
    result = run_with_hazard(FORK_ONCE, method, env=env)
    assert _stdout(result) == "signal SIGSEGV"
    assert result.hazard is not None
    assert (result.hazard["method"], result.hazard["library"]) == ("verbs", str(rdma_core_33))
    assert result.hazard["fork_state_before"] is result.hazard["fork_state_after"] is None


def test_madvise_needs_no_libibverbs() -> None:
    """The madvise method never loads libibverbs."""
    result = run_with_hazard(
        "print(any('libibverbs' in line for line in open('/proc/self/maps')))",
        "madvise",
    )
    assert _stdout(result) == "False"
    assert result.hazard is not None
    assert result.hazard["library"] is None
    assert result.hazard["fallback"] is None  # asked for, not fallen back to


def test_unknown_method_is_rejected() -> None:
    """plant() validates its argument before touching memory (safe to call in-process)."""
    from rdmaspawn.testing.hazard import plant

    with pytest.raises(ValueError):
        plant("fork")


def test_missing_verbs_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libibverbs a verbs test skips, so hazard tests run anywhere."""
    monkeypatch.setattr(hazard_helpers, "verbs_available", lambda: False)
    monkeypatch.delenv("RDMASPAWN_REQUIRE_VERBS", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require_verbs()


def test_missing_verbs_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under RDMASPAWN_REQUIRE_VERBS=1 (CI) a missing libibverbs is a failure, not a skip."""
    monkeypatch.setattr(hazard_helpers, "verbs_available", lambda: False)
    monkeypatch.setenv("RDMASPAWN_REQUIRE_VERBS", "1")
    with pytest.raises(pytest.fail.Exception):
        require_verbs()


def test_pyverbs_shares_the_system_libibverbs() -> None:
    """pyverbs' fork_init() arms the same libibverbs that plant("verbs") uses.

    So a pyverbs program is exposed exactly as plant() models: after
    pyverbs.fork.fork_init(), plant finds fork support already enabled, and a
    fork() child still dies.
    """
    require_pyverbs()
    require_verbs()
    result = run_with_hazard(
        """
        import pyverbs.fork
        print(int(pyverbs.fork.is_fork_initialized()))
        if int(pyverbs.fork.is_fork_initialized()) != 2:
            pyverbs.fork.fork_init()
            from rdmaspawn.testing.hazard import plant
            print(plant("verbs").fork_state_before)
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            print(describe(os.waitpid(pid, 0)[1]))
        """,
        None,
    )
    lines = _stdout(result).splitlines()
    if lines == ["2"]:
        pytest.skip(
            "libibverbs says fork support is unneeded here (kernel copy-on-fork)"
        )
    assert lines == ["0", "enabled", "signal SIGSEGV"]
