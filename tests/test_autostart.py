"""The RDMASPAWN switch and its .pth hook, in real child interpreters.

Pins down: nothing is imported when the variable is unset; each item applies;
bad items are one line each and the rest still applies; the verbose line is
said once although site.py processes a venv's .pth files twice; -S skips it
and -I keeps it; an interpreter that cannot import rdmaspawn (another venv, a
broken install) runs normally; a user's sitecustomize and PYTHONSTARTUP run
after the hook and keep the last word.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rdmaspawn._startup.switch import ON, Settings, parse
from rdmaspawn.dropin import cpython as _cpython

HOOK = "rdmaspawn-autostart.pth"

_REPORT = textwrap.dedent("""\
    import json, sys
    out = {"imported": "rdmaspawn" in sys.modules}
    if out["imported"]:
        import multiprocessing, rdmaspawn
        from rdmaspawn.tools.guard import is_guarded
        out.update(patched=rdmaspawn.is_patched(), guard=is_guarded(),
                   start_method=multiprocessing.get_start_method())
    print(json.dumps(out))
""")


def _can_import(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def env_with(value: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RDMASPAWN"}
    if value is not None:
        env["RDMASPAWN"] = value
    return env


def python(*args: str, value: str | None, exe: str = sys.executable, cwd: str | None = None,
           extra_env: dict[str, str] | None = None, stdin: str | None = None,
           ) -> subprocess.CompletedProcess[str]:
    env = env_with(value)
    env.update(extra_env or {})
    return subprocess.run([exe, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          input=stdin, timeout=60, check=False)


def report(*flags: str, value: str | None, **kw: object) -> dict[str, object]:
    import json

    r = python(*flags, "-c", _REPORT, value=value, **kw)  # type: ignore[arg-type]
    assert r.returncode == 0, r.stderr
    return {"stderr": r.stderr, **json.loads(r.stdout)}


def installed_hook() -> str:
    """The .pth file the installed rdmaspawn put in site-packages (not the checkout's own
    copy at the repository root, which is on sys.path under ``python -m pytest``)."""
    import site

    for entry in [*site.getsitepackages(), site.getusersitepackages()]:
        path = os.path.join(entry, HOOK)
        if os.path.isfile(path):
            return path
    pytest.fail(f"{HOOK} is not installed in any sys.path directory of {sys.executable}")


def test_parse_items() -> None:
    """Each item of the grammar, the 'on' alias, and to_env() round trips."""
    assert parse("") == (Settings(), [])
    assert parse("off") == (Settings(), [])
    assert parse("on")[0] == ON
    assert parse("1,verbose")[0] == Settings(True, "raise", "forkserver", True, True)
    assert parse("repair")[0] == Settings(repair=True)
    assert parse(" patch , guard ")[0] == Settings(patch=True, guard="warn")
    assert parse("start-method=spawn")[0] == Settings(start_method="spawn")
    for s in (ON, Settings(patch=True, verbose=True), Settings(guard="warn"),
              Settings(repair=True), Settings()):
        assert parse(s.to_env())[0] == s
    settings, problems = parse("patch,guard=maybe,bogus,start_method=fork")
    assert settings == Settings(patch=True)
    assert len(problems) == 3 and all("RDMASPAWN" in p for p in problems)


def test_hook_is_installed_beside_the_package() -> None:
    """`pip install` (wheel or -e) put the hook at the top of a site directory."""
    hook = installed_hook()
    import site

    site_dirs = {os.path.realpath(d) for d in site.getsitepackages()}
    assert os.path.realpath(os.path.dirname(hook)) in site_dirs


def test_unset_imports_nothing() -> None:
    """With RDMASPAWN unset (or off) the interpreter never imports rdmaspawn."""
    assert report(value=None) == {"stderr": "", "imported": False}
    assert report(value="off") == {"stderr": "", "imported": False}


def test_on_applies_everything() -> None:
    out = report(value="on")
    assert out == {"stderr": "", "imported": True, "patched": True, "guard": "raise",
                   "start_method": "forkserver"}


def test_items_apply_one_by_one() -> None:
    assert report(value="patch") == {"stderr": "", "imported": True, "patched": True,
                                     "guard": None,
                                     "start_method": _cpython.require().mp_default}
    assert report(value="guard=warn,start_method=spawn") == {
        "stderr": "", "imported": True, "patched": False, "guard": "warn",
        "start_method": "spawn"}


def test_multiprocessing_is_adjusted_when_imported_not_before() -> None:
    """Start-up does not import multiprocessing; its first import gets the default and Pool fix."""
    r = python("-c", "import sys; before = 'multiprocessing' in sys.modules; "
               "import multiprocessing, multiprocessing.pool as p; "
               "print(before, multiprocessing.get_start_method(), "
               "p.Pool.__init__.__rdmaspawn_poolhandler__)", value="on")
    assert (r.returncode, r.stdout, r.stderr) == (0, "False forkserver True\n", "")


def test_verbose_says_once() -> None:
    """One line, although site.py runs a venv's .pth files twice."""
    out = report(value="on,verbose")
    lines = str(out["stderr"]).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("rdmaspawn: RDMASPAWN='on,verbose' in pid ")
    # This host has no RDMA netlink: the repair refuses and forkserver is the fallback.
    assert "patch(); guard('raise'); repair_fork() refused: " in lines[0]
    assert lines[0].endswith("multiprocessing's default start method is forkserver")


def test_bad_items_warn_in_one_line_each_and_the_rest_applies() -> None:
    out = report(value="patch,guard=loud,frobnicate")
    lines = str(out["stderr"]).splitlines()
    assert len(lines) == 2, lines
    assert all(line.startswith("rdmaspawn: ignoring ") for line in lines)
    assert "Traceback" not in str(out["stderr"])
    assert out["patched"] is True and out["guard"] is None


def test_minus_S_skips_the_hook() -> None:
    """python -S processes no .pth file: the hook cannot run, nothing breaks."""
    r = python("-S", "-c", "import sys; print('rdmaspawn' in sys.modules)", value="on,verbose")
    assert (r.returncode, r.stdout, r.stderr) == (0, "False\n", "")


def test_minus_I_keeps_the_hook() -> None:
    """-I ignores PYTHON* variables and the user site, not site-packages nor RDMASPAWN."""
    out = report("-I", value="on")
    assert out["patched"] is True and out["guard"] == "raise"


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of the same Python without rdmaspawn (and without pip: quick)."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   timeout=120)
    return root


def _site_packages(venv: Path) -> Path:
    (found,) = glob.glob(str(venv / "lib" / "python3*" / "site-packages"))
    return Path(found)


def test_another_venv_is_untouched(bare_venv: Path) -> None:
    """A Python without rdmaspawn installed ignores RDMASPAWN (there is no hook there)."""
    r = python("-c", "print('ran')", value="on,verbose", exe=str(bare_venv / "bin" / "python"))
    assert (r.returncode, r.stdout, r.stderr) == (0, "ran\n", "")


@pytest.mark.parametrize("package", [None, "raise ImportError('the C core is missing\\nmore')"])
def test_broken_install_says_one_line(bare_venv: Path, package: str | None) -> None:
    """The hook without an importable rdmaspawn: one line on stderr, the program runs."""
    site_dir = _site_packages(bare_venv)
    shutil.copy(installed_hook(), site_dir / HOOK)
    pkg = site_dir / "rdmaspawn"
    try:
        if package is not None:
            pkg.mkdir()
            (pkg / "__init__.py").write_text(package + "\n")
        r = python("-c", "print('ran')", value="on,verbose", exe=str(bare_venv / "bin" / "python"))
        unset = python("-c", "print('ran')", value=None, exe=str(bare_venv / "bin" / "python"))
    finally:
        (site_dir / HOOK).unlink()
        shutil.rmtree(pkg, ignore_errors=True)
    assert (r.returncode, r.stdout) == (0, "ran\n")
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("rdmaspawn: RDMASPAWN is set but rdmaspawn cannot be imported (")
    assert ("ModuleNotFoundError" if package is None else "the C core is missing") in lines[0]
    assert (unset.returncode, unset.stdout, unset.stderr) == (0, "ran\n", "")


def test_sitecustomize_runs_after_the_hook_and_keeps_its_choices(tmp_path: Path) -> None:
    """The user's sitecustomize sees rdmaspawn in force and may choose a start method."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""\
        import multiprocessing, sys
        import rdmaspawn
        sys.sitecustomize_saw_patched = rdmaspawn.is_patched()
        multiprocessing.set_start_method("spawn")
    """))
    code = ("import multiprocessing, sys, rdmaspawn; "
            "print(sys.sitecustomize_saw_patched, rdmaspawn.is_patched(), "
            "multiprocessing.get_start_method())")
    r = python("-c", code, value="on", extra_env={"PYTHONPATH": str(tmp_path)}, cwd=str(tmp_path))
    assert (r.returncode, r.stdout, r.stderr) == (0, "True True spawn\n", "")


def test_pythonstartup_runs_and_the_hook_stays(tmp_path: Path) -> None:
    """An interactive session's PYTHONSTARTUP file runs, after the hook."""
    startup = tmp_path / "startup.py"
    startup.write_text("import rdmaspawn\nstartup_saw_patched = rdmaspawn.is_patched()\n")
    r = python("-i", "-q", value="on", extra_env={"PYTHONSTARTUP": str(startup)},
               stdin="import rdmaspawn\nprint('RESULT', startup_saw_patched, "
                     "rdmaspawn.is_patched())\n", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "RESULT True True" in r.stdout, (r.stdout, r.stderr)


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="before 3.12 a subinterpreter loads the core like the main one")
def test_a_subinterpreter_is_told_the_truth() -> None:
    """Under RDMASPAWN a subinterpreter runs the hook, and the built C core
    cannot be loaded there (cffi modules are single-phase). Start-up loads no
    C; the first spawn, which would load the patch, says why it cannot in
    one line, not that the core is unbuilt and needs a pip install, and the
    spawn goes on as it would without rdmaspawn."""
    code = textwrap.dedent("""\
        try:
            import _interpreters as interpreters
        except ImportError:
            import _xxsubinterpreters as interpreters
        interp = interpreters.create()
        interpreters.run_string(interp, "pass")
        print("started", flush=True)
        interpreters.run_string(interp, "import subprocess\\n"
                                        "try: subprocess.run(['true'])\\n"
                                        "except Exception: pass")  # isolated: no fork_exec
        interpreters.destroy(interp)   # 3.14+ warns about one left at exit
    """)
    res = python("-c", code, value="on")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "started\n"
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "does not support loading in subinterpreters" in lines[0], lines
    assert "not built" not in res.stderr and "pip install" not in res.stderr, lines


#: What RDMASPAWN=on must not import at start-up: dataclasses pulled in
#: inspect, ast and tokenize, ~30-40 ms of CPU per interpreter on 3.13
#: (benchmarks/startup.py measures the whole cost). dis (~2 ms) stays:
#: _cpython reads Popen._execute_child's bytecode with it.
#: On 3.14+ any typing.NamedTuple imports annotationlib, and with it ast: the
#: standard library's cost, not rdmaspawn's.
HEAVY_AT_START = ("dataclasses", "inspect", "tokenize") + (
    ("ast",) if sys.version_info < (3, 14) else ())


def test_on_leaves_the_heavy_modules_unimported() -> None:
    """The start-up cost of ``on`` is subprocess and the engine, not
    dataclasses and what it imports: none of them is loaded after start-up
    (checked by presence, not timing)."""
    code = ("import json, sys; import rdmaspawn; "
            f"print(json.dumps([m for m in {HEAVY_AT_START!r} if m in sys.modules]))")
    for value in (None, "on"):
        r = python("-c", code, value=value)
        assert (r.returncode, r.stdout.strip()) == (0, "[]"), (value, r.stdout, r.stderr)


#: What ``on`` may add to an interpreter's modules at start-up, and at
#: ``import subprocess``, beyond rdmaspawn's own start-up modules: the socket
#: module the fork repair asks the kernel through (where ib_core is loaded), and the
#: built-in errno and functools C half; mmap, which maps the doctor's markers
#: (_startup/markers.py).
#: No typing, threading, functools, collections, contextlib, warnings,
#: ctypes, nor cffi's backend (the C core): each would cost more than the
#: whole hook (python -m rdmaspawn.bench.startup; issue 29 item 4).
LIGHT_EXTRA = {"_socket", "_functools", "errno", "mmap"}
#: rdmaspawn's modules that start-up loads: no drop-in, no engine, no doctor,
#: no guard (its stand-ins at os.fork load it at the first fork).
LIGHT_OWN = {"rdmaspawn", "rdmaspawn._startup", "rdmaspawn._startup.autostart",
             "rdmaspawn._startup.onimport", "rdmaspawn._startup.sourcetree",
             "rdmaspawn._startup.standin", "rdmaspawn._startup.switch",
             "rdmaspawn._startup.repairgate", "rdmaspawn._host", "rdmaspawn._host.rdmanetlink",
             "rdmaspawn._startup.markers"}


@pytest.mark.parametrize("program", ["pass", "import subprocess"])
def test_on_loads_almost_nothing_at_start_up(program: str) -> None:
    """Under ``on``, start-up (and a first ``import subprocess``) loads only
    the hook's own small modules: the guard's machinery waits for the first
    fork, the patch and the engine for the first spawn (checked by presence,
    not timing: the benchmark measures the cost)."""
    code = f"{program}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"
    bare, on = (python("-c", code, value=value) for value in (None, "on"))
    assert bare.returncode == on.returncode == 0, (bare.stderr, on.stderr)
    added = set(json.loads(on.stdout)) - set(json.loads(bare.stdout))
    assert added - LIGHT_OWN - LIGHT_EXTRA == set()
    assert "rdmaspawn.tools.guard" not in added  # stand-ins wait at os.fork for it


def test_on_loads_the_engine_at_the_first_spawn_and_every_route_gets_it() -> None:
    """``on`` costs an interpreter that never spawns nor forks only
    stand-ins: the program's first import of subprocess (or of
    _posixsubprocess, or one of rdmaspawn's modules that import it) puts
    stand-ins where the patch goes, so that no stock fork_exec is left; the
    patch and the engine load with the first spawn (or os.spawn*), and each
    route then goes through the engine, guarded."""
    code = textwrap.dedent("""\
        import json, os, sys
        out = {"at_start": [m for m in ("subprocess", "rdmaspawn._native.engine",
                                        "rdmaspawn.dropin.patch") if m in sys.modules],
               "fork_standin": getattr(os.fork, "__rdmaspawn_standin__", False)}
        how = sys.argv[1]
        if how == "spawnv":
            out["status"] = os.spawnv(os.P_WAIT, "/bin/true", ["true"])
        elif how == "_posixsubprocess":
            import _posixsubprocess
        elif how == "own":  # one of rdmaspawn's modules is the first to import it
            from rdmaspawn.dropin.popen import Popen
        else:
            import subprocess
        import _posixsubprocess, subprocess
        names = [getattr(_posixsubprocess, "fork_exec"), getattr(subprocess, "_fork_exec", None),
                 subprocess.Popen._posix_spawn]
        out["stock"] = [f.__qualname__ for f in names if f is not None
                        and not hasattr(f, "__wrapped__")  # a stand-in, a guard wrapper
                        and not str(getattr(f, "__module__", "")).startswith("rdmaspawn")]
        out["patch_loaded"] = "rdmaspawn.dropin.patch" in sys.modules
        out["run"] = subprocess.run(["/bin/true"]).returncode
        import rdmaspawn
        from rdmaspawn._native import engine
        from rdmaspawn.dropin import cpython
        home, attr = cpython.require().home
        fork_exec = getattr(sys.modules[home], attr)
        out.update(patched=rdmaspawn.is_patched(), spawns=engine.spawn_count(),
                   fork_guarded=getattr(os.fork, "__rdmaspawn_guard__", False),
                   exec_guarded=getattr(fork_exec, "__rdmaspawn_guard__", False),
                   engine_below=getattr(fork_exec.__wrapped__, "__rdmaspawn__", False))
        print(json.dumps(out))
    """)
    for how, spawns in (("subprocess", 1), ("spawnv", 2), ("_posixsubprocess", 1),
                        ("own", 1)):
        r = python("-c", code, how, value="on")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["at_start"] == [] and out["fork_standin"], (how, out)
        # Before the first spawn: every name is a stand-in, nothing stock.
        assert out["stock"] == [] and out["patch_loaded"] == (how == "spawnv"), (how, out)
        # The first spawn put the guard in force, os.fork's wrappers with it.
        assert (out["patched"], out["exec_guarded"], out["engine_below"],
                out["fork_guarded"]) == (True, True, True, True), (how, out)
        assert out["spawns"] == spawns and out.get("status", 0) == out["run"] == 0, (how, out)


_IMPORT_DURING_THE_FIRST_SPAWN = textwrap.dedent("""\
    import importlib.abc, importlib.util, json, sys, threading, time
    started = threading.Event()

    class SlowPatchImport(importlib.abc.MetaPathFinder):
        # dropin.patch's import held a second once begun (its module lock taken).
        def find_spec(self, name, path, target=None):
            if name != "rdmaspawn.dropin.patch":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module
            def exec_module(module):
                started.set()
                time.sleep(1.0)  # the other thread's first spawn comes now
                run(module)
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, SlowPatchImport())
    import subprocess  # the stand-ins are placed
    def importer():
        import rdmaspawn.dropin.patch
    t = threading.Thread(target=importer)
    t.start()
    started.wait()
    rc = subprocess.run(["true"]).returncode  # the first spawn: the stand-ins give way
    t.join()
    import rdmaspawn
    print(json.dumps({"rc": rc, "patched": rdmaspawn.is_patched()}))
""")


@pytest.mark.parametrize("value", ["patch", "on"])
def test_an_import_of_the_patch_during_the_first_spawn_is_no_deadlock(value: str) -> None:
    """Thread B imports rdmaspawn.dropin.patch while thread A's first spawn
    settles the stand-ins, which imports that module too. The module's end
    used to settle them as well: B waited there for A's lock, A for B's
    import, for ever (20 s of 20 here, before the fix)."""
    try:
        r = subprocess.run([sys.executable, "-c", _IMPORT_DURING_THE_FIRST_SPAWN],
                           env=env_with(value), capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("no answer in 60 s: the import and the first spawn wait for each other")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"rc": 0, "patched": True}


def test_no_thread_sees_subprocess_before_the_patch() -> None:
    """Issue 27 item 8: thread A's first ``rdmaspawn.Popen`` loads the drop-in,
    which imports subprocess; thread B, importing subprocess the moment it
    appears, must find no stock fork_exec there (it did 20 times in 20: the
    patch waited for the drop-in's whole import)."""
    code = textwrap.dedent("""\
        import json, sys, threading
        seen = {}

        def b():
            while "subprocess" not in sys.modules:
                pass
            import _posixsubprocess, subprocess
            names = {"_posixsubprocess.fork_exec": _posixsubprocess.fork_exec,
                     "subprocess._fork_exec": getattr(subprocess, "_fork_exec", None)}
            seen["stock"] = [name for name, f in names.items()
                             if f is not None and type(f).__name__ == "builtin_function_or_method"]

        t = threading.Thread(target=b)
        t.start()
        import rdmaspawn
        rdmaspawn.Popen  # thread A: loads the drop-in, which imports subprocess
        t.join()
        print(json.dumps(seen))
    """)
    for _ in range(5):
        r = python("-c", code, value="on")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"stock": []}


_MARKERS_SEEN = r"""
import json, os, subprocess, sys
def seen():
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    with open("/proc/self/maps") as f:
        maps = sorted({line.split()[-2] for line in f if "/memfd:rdmaspawn-" in line})
    return {"maps": maps, "fds": sum("/memfd:rdmaspawn-" in target for target in fds)}
before = seen()
subprocess.run([sys.executable, "-c", "pass"], check=True)
print(json.dumps({"before": before, "after": seen()}))
"""


def test_on_maps_its_markers_at_start_up_and_holds_no_descriptor_after_the_first_spawn() -> None:
    """The doctor's markers (``_startup.markers``) under ``on``: both mapped from
    the start, before any spawn, without the C core; 3.13+'s mmap keeps no
    descriptor for them, and before 3.13 the descriptors its mmap keeps are
    gone once the first spawn has loaded the core (the markers move there)."""
    r = python("-c", _MARKERS_SEEN, value="on")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    names = ["/memfd:rdmaspawn-guard-raise", "/memfd:rdmaspawn-patched"]
    assert out["before"]["maps"] == out["after"]["maps"] == names, out
    assert out["after"]["fds"] == 0, out
    assert out["before"]["fds"] == (0 if sys.version_info >= (3, 13) else 2), out


_DAEMON = r"""
import json, os, subprocess, sys
os.closerange(3, 4096)  # as a daemon does: every descriptor it did not open
files = [open(path, "rb") for path in ("/etc/passwd", "/etc/hostname", "/etc/passwd")]
numbers = [f.fileno() for f in files]
ran = subprocess.run([sys.executable, "-c", "pass"]).returncode
import rdmaspawn
rdmaspawn.unpatch()  # the patched marker's page goes: a second close of the mmap
rdmaspawn.unguard()
read = [len(os.read(f.fileno(), 1)) for f in files]
print(json.dumps({"numbers": numbers, "ran": ran, "read": read}))
"""


def test_a_program_that_closes_every_descriptor_keeps_the_ones_it_opens_after() -> None:
    """Before 3.13 the markers' mmaps keep a descriptor each from start-up on. A
    program that closes every descriptor above 2 and opens files of its own,
    which take those numbers, must keep them: the first spawn (the markers
    move to the C core), unpatch() and unguard() close no descriptor of the
    program's (before, the first spawn closed one, and its own error pipe's
    close then failed with EBADF), and nothing is said at exit."""
    r = python("-c", _DAEMON, value="on")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    out = json.loads(r.stdout)
    assert out["ran"] == 0 and out["read"] == [1, 1, 1], out
    assert out["numbers"] == [3, 4, 5], out  # the lowest: the markers' numbers among them


_SUBINTERPRETER = r"""
import json, os, subprocess, sys
try:
    import _interpreters as interpreters
except ImportError:
    import _xxsubinterpreters as interpreters
from rdmaspawn._host.procfs import parse_maps, read_proc
from rdmaspawn.tools.doctor.inforce import from_mappings
interp = interpreters.create()
interpreters.run_string(interp, '''
import json, subprocess, sys
ran = subprocess.run(["/bin/true"]).returncode
print(json.dumps([ran, "rdmaspawn._rdmaspawn_cffi" in sys.modules]), flush=True)
''')
seen = from_mappings(parse_maps(read_proc(os.getpid(), "maps")))
alive = [seen.protection, seen.unprotected, seen.text()]
interpreters.destroy(interp)
seen = from_mappings(parse_maps(read_proc(os.getpid(), "maps")))
print(json.dumps({"alive": alive, "gone": [seen.protection, seen.unprotected],
                  "main": subprocess.run(["/bin/true"]).returncode}))
"""


@pytest.mark.skipif(not any(_can_import(m) for m in ("_interpreters", "_xxsubinterpreters")),
                    reason="this CPython has no sub-interpreters to create")
def test_a_subinterpreter_that_cannot_load_the_core_says_it_is_not_protected() -> None:
    """Under ``on``, a sub-interpreter that cannot load the core (3.12+'s,
    for a single-phase extension module) runs its first spawn unpatched and
    says so in one line, and the patch's marker it mapped at start-up now
    tells the doctor the process is not protected, and why, while that
    sub-interpreter lives. One that loads it (3.9-3.11) is patched and says
    nothing. Nothing crashes; the main interpreter's spawns stay patched."""
    r = python("-c", _SUBINTERPRETER, value="on")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    ran, loaded = json.loads(lines[0])
    assert ran == 0, r.stdout
    assert loaded == (sys.version_info < (3, 12)), r.stdout
    out = json.loads(lines[-1])
    said = [line for line in r.stderr.splitlines() if line.startswith("rdmaspawn:")]
    if loaded:
        assert out["alive"][:2] == ["protected", None] and said == [], (out, said)
    else:
        assert out["alive"][:2] == ["not protected", "subinterpreter"], out
        assert "sub-interpreter" in out["alive"][2], out
        assert len(said) == 1 and "this sub-interpreter starts are not protected" in said[0], said
    assert out["gone"] == ["protected", None] and out["main"] == 0, out
