"""cgroup=: the child starts in a cgroup v2 directory.

Through clone3(CLONE_INTO_CGROUP) where the kernel has it, else (forced
here with the glibc clone() path) by writing itself into cgroup.procs before
exec. Needs root and a cgroup v2 hierarchy: an existing cgroup2 mount, else
one mounted for the test (umounted after); skipped without them.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import pytest
from helpers.hazard import run_with_hazard
from helpers.report import last_json

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children", "setup_probe.py")


def _cgroup2_mount() -> str | None:
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == "cgroup2":
                return fields[1]
    return None


@pytest.fixture
def cgroup() -> Iterator[tuple[str, str]]:
    """A fresh cgroup: (its path, its name as /proc/PID/cgroup shows it)."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    root = _cgroup2_mount()
    mounted = None
    if root is None:
        mounted = tempfile.mkdtemp(prefix="rdmaspawn-cgroup2-")
        if subprocess.run(["mount", "-t", "cgroup2", "none", mounted]).returncode != 0:
            os.rmdir(mounted)
            pytest.skip("no cgroup2 hierarchy and mount -t cgroup2 failed")
        root = mounted
    path = os.path.join(root, f"rdmaspawn-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(path)
    try:
        yield path, "0::/" + os.path.relpath(path, root)
    finally:
        os.rmdir(path)
        if mounted:
            subprocess.run(["umount", mounted], check=True)
            os.rmdir(mounted)


def test_child_starts_in_the_cgroup(cgroup: tuple[str, str]) -> None:
    """Popen(cgroup=) with the hazard planted, the preexec helper under
    patch(), the engine's clone() fallback (cgroup.procs) and the helper under
    stock CPython all put the child in the cgroup; a plain child is not."""
    path, name = cgroup
    code = f"""
        import json, subprocess, rdmaspawn, rdmaspawn.preexec as P
        from rdmaspawn._native import engine as _engine
        from rdmaspawn._child.model import build
        def cgroup_of(popen, **kwargs):
            out = popen([sys.executable, {PROBE!r}], stdout=subprocess.PIPE, **kwargs)
            return json.loads(out.communicate()[0])["cgroup"]
        out = {{"plain": cgroup_of(rdmaspawn.Popen)}}
        if hazard is None:
            out["stock"] = cgroup_of(subprocess.Popen, preexec_fn=P.cgroup({path!r}))
        else:
            out["keyword"] = cgroup_of(rdmaspawn.Popen, cgroup={path!r})
            with rdmaspawn.patched():
                out["patched"] = cgroup_of(subprocess.Popen, preexec_fn=P.cgroup({path!r}))
            r, w = os.pipe()
            pid, _ = _engine.spawn([sys.executable, {PROBE!r}], [sys.executable], stdout=w,
                                   setup=build(cgroup={path!r}), force_clone=True)
            os.close(w)
            with os.fdopen(r) as f:
                out["clone fallback"] = json.loads(f.read())["cgroup"]
            os.waitpid(pid, 0)
        print(json.dumps(out))
    """
    results = {}
    for method in (None, "madvise"):
        run = run_with_hazard(code, method)
        results.update(last_json(run))
    assert results.pop("plain") != [name]
    assert results == {key: [name] for key in
                       ("stock", "keyword", "patched", "clone fallback")}


def test_not_a_cgroup_is_an_oserror_naming_the_path(tmp_path: object) -> None:
    """A directory that is no cgroup: OSError naming its cgroup.procs, no child."""
    import rdmaspawn

    def children() -> str:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return f.read()

    before = children()
    with pytest.raises(FileNotFoundError) as info:
        rdmaspawn.run(["true"], cgroup=str(tmp_path))
    assert info.value.filename == os.path.join(str(tmp_path), "cgroup.procs")
    assert children() == before


def test_preexec_cgroup_is_joined_as_the_new_user(cgroup: tuple[str, str]) -> None:
    """preexec_fn=preexec.cgroup(path) with user=nobody joins as nobody, after
    the id change, as CPython's preexec_fn does: refused (a SubprocessError)
    where nobody may not write cgroup.procs, as under stock CPython. (A
    cgroup.procs opened by the root parent let nobody in.) The keyword
    cgroup= keeps the privilege-first order: the child starts in it."""
    path, name = cgroup
    code = f"""
        import json, subprocess, rdmaspawn, rdmaspawn.preexec as P
        def outcome(popen, **kwargs):
            try:
                out = popen([sys.executable, "-I", {PROBE!r}], stdout=subprocess.PIPE,
                            user=65534, group=65534, extra_groups=[], cwd="/",
                            **kwargs).communicate()[0]
                return json.loads(out)["cgroup"]
            except Exception as exc:
                return [type(exc).__name__, isinstance(exc, subprocess.SubprocessError)]
        out = {{"stock": outcome(subprocess.Popen, preexec_fn=P.cgroup({path!r}))}}
        out["ours"] = outcome(rdmaspawn.Popen, preexec_fn=P.cgroup({path!r}))
        with rdmaspawn.patched():
            out["patched"] = outcome(subprocess.Popen, preexec_fn=P.cgroup({path!r}))
        out["keyword"] = outcome(rdmaspawn.Popen, cgroup={path!r})
        print(json.dumps(out))
    """
    # nobody cannot run this venv's interpreter (under /root); the system's will do.
    python = "/usr/bin/python3"
    run = run_with_hazard(code.replace("sys.executable", repr(python)), None)
    out = last_json(run)
    assert out["stock"] == ["SubprocessError", True]
    assert out["ours"] == out["patched"] == ["ChildSetupError", True]
    assert out["keyword"] == [name]
