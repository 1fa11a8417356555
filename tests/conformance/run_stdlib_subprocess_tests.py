"""Run CPython's own test_subprocess with ``rdmaspawn.patch()`` in force.

    python tests/conformance/run_stdlib_subprocess_tests.py [options] [PATTERN ...]

The interpreter that runs this file is the one tested: its stdlib's
``test.test_subprocess`` is loaded and run with unittest after
``rdmaspawn.patch()``, so every child the tests start goes through the
engine instead of fork()/vfork()/posix_spawn. The tests listed in
``exclusions.txt`` next to this file are skipped, each with its reason; they
assert CPython internals (how the child is made), not behaviour.

What the run checks besides the tests themselves:
  * the patch is still in force after every test (a test that mocks the
    primitive must put ours back), and at the end;
  * the engine really started children: rdmaspawn's engine entry point is
    wrapped by a counter, a preflight spawn must go through it, and the
    whole run must have gone through it many times;
  * every exclusion that applies to this Python matches a test (no stale
    entries).
Exit status 0 only when all of that holds and unittest reports success; a
test that fails is run once more, alone, and counts as passed if it passes
then (as with CPython's regrtest --rerun), with both results printed.

Options: --no-patch runs the suite on plain CPython (to tell environmental
failures from rdmaspawn's), --no-exclusions runs the excluded tests too,
-v prints one line per test, PATTERN (fnmatch, as in unittest's -k
substring when no wildcard) selects tests.
"""
from __future__ import annotations

import argparse
import faulthandler
import fnmatch
import functools
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXCLUSIONS = os.path.join(HERE, "exclusions.txt")
MODULE = "test.test_subprocess"
# Under the patch the suite makes ~2400 engine spawns (3.9-3.13); far fewer
# means the patch was not what started the children.
MIN_ENGINE_SPAWNS = 200

_LINE = re.compile(
    r"^(?P<test>\S+)"
    r"(?:\s+(?P<versions>3\.\d+(?:\+|-3\.\d+)?))?"
    r"\s+#\s*(?P<reason>\S.*)$"
)


class Exclusion:
    def __init__(self, pattern, lo, hi, reason, lineno):
        if not pattern.startswith(MODULE + "."):
            pattern = MODULE + "." + pattern
        self.pattern = pattern
        self.lo, self.hi = lo, hi
        self.reason = reason
        self.lineno = lineno
        self.matched = 0

    def applies(self, version):
        return self.lo <= version <= self.hi

    def matches(self, test_id):
        return fnmatch.fnmatchcase(test_id, self.pattern)


def _version(text):
    major, minor = text.split(".")
    return (int(major), int(minor))


def load_exclusions(path=EXCLUSIONS):
    """Parse ``TEST_ID [3.X | 3.X-3.Y | 3.X+] # reason`` lines."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = _LINE.match(line)
            if not m:
                raise SystemExit(f"{path}:{lineno}: expected 'TEST_ID [3.X[-3.Y|+]] # reason': {line}")
            spec = m.group("versions")
            lo, hi = (0, 0), (99, 99)
            if spec:
                if spec.endswith("+"):
                    lo = _version(spec[:-1])
                elif "-" in spec:
                    a, b = spec.split("-")
                    lo, hi = _version(a), _version(b)
                else:
                    lo = hi = _version(spec)
            out.append(Exclusion(m.group("test"), lo, hi, m.group("reason"), lineno))
    return out


def iter_tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from iter_tests(item)
        else:
            yield item


def skip_test(test, reason):
    """Make ``test`` report a skip with ``reason`` instead of running."""
    @functools.wraps(getattr(test, test._testMethodName))
    def skipped(*args, **kwargs):
        raise unittest.SkipTest(reason)

    skipped.__unittest_skip__ = True
    skipped.__unittest_skip_why__ = reason
    setattr(test, test._testMethodName, skipped)


def _owner(obj):
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    return obj.__name__


class Counter:
    """A thin counting wrapper; ``__wrapped__`` keeps unwrapping chains working."""

    def __init__(self, func):
        self.func = func
        self.__wrapped__ = func
        self._lock = threading.Lock()
        self.calls = 0

    def __call__(self, *args, **kwargs):
        with self._lock:
            self.calls += 1
        return self.func(*args, **kwargs)


class EngineSpawns:
    """The engine's spawns since this was made (rs_spawn()'s own count)."""

    def __init__(self, engine):
        self._engine = engine
        self._base = engine.spawn_count()

    @property
    def calls(self):
        return self._engine.spawn_count() - self._base


class Instruments:
    """Counts engine spawns and fork() fallbacks; checks the patch is in force."""

    def __init__(self, patched):
        self.patched = patched
        self.violations = []
        self.engine = None
        self.fallbacks = []
        self.installed = {}
        if not patched:
            return
        import rdmaspawn
        from rdmaspawn._native import engine as _engine
        from rdmaspawn.dropin import patch as _patch

        self.rdmaspawn = rdmaspawn
        # Every path into the C core (the C fork_exec, the posix_spawn
        # shortcut, os.spawn*) ends in rs_spawn(), which counts its calls.
        self.engine = EngineSpawns(_engine)
        # What patch() replaced, each with what it put there: all of it must
        # still be there after every test.
        for obj, attr, _old, new in _patch._applied:
            self.installed[f"{_owner(obj)}.{attr}"] = (obj, attr, new)
        required = ["_posixsubprocess.fork_exec", "os._spawnvef"]
        if hasattr(subprocess, "_fork_exec"):
            required.append("subprocess._fork_exec")
        missing = [name for name in required if name not in self.installed]
        if not ({"subprocess._USE_POSIX_SPAWN", "subprocess.Popen._posix_spawn"}
                & set(self.installed)):
            missing.append("the posix_spawn shortcut")
        if missing:
            raise SystemExit(f"patch() did not replace {', '.join(missing)}: "
                             f"it replaced {sorted(self.installed)}")
        for name in ("_posixsubprocess.fork_exec", "subprocess._fork_exec"):
            if name not in self.installed:
                continue
            func = self.installed[name][2]
            if not getattr(func, "__rdmaspawn__", False):
                raise SystemExit(f"patch() did not install rdmaspawn's fork_exec as {name}: {func!r}")
            # preexec_fn goes to CPython's fork_exec (no DONTFORK memory here).
            counter = Counter(func.__wrapped__)
            func.__wrapped__ = counter
            self.fallbacks.append(counter)

    def problems(self):
        if not self.patched:
            return []
        out = []
        if not self.rdmaspawn.is_patched():
            out.append("rdmaspawn.is_patched() is False")
        for name, (obj, attr, new) in self.installed.items():
            if getattr(obj, attr) is not new:
                out.append(f"{name} is {getattr(obj, attr)!r}, not rdmaspawn's {new!r}")
        return out

    def check(self, where):
        for problem in self.problems():
            self.violations.append(f"{where}: {problem}")

    def preflight(self):
        """One spawn through subprocess must reach the engine."""
        if not self.patched:
            return
        before = self.engine.calls
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        if self.engine.calls != before + 1:
            raise SystemExit(
                f"preflight: subprocess.run() made {self.engine.calls - before} "
                "engine spawns, expected 1: the patch is not routing children")


def lower_fd_limit(limit=1024):
    """Let test_no_leaking run: it skips unless it hits EMFILE within 1026 fds.

    It checks that a spawn failing for want of fds leaks none; with a soft
    RLIMIT_NOFILE above ~1026 (containers often have 2**20) it is skipped.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        print(f"RLIMIT_NOFILE lowered from {soft} to {limit} for test_no_leaking")


def make_result_class(instruments):
    class Result(unittest.TextTestResult):
        def stopTest(self, test):
            super().stopTest(test)
            instruments.check(test.id())

    return Result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-patch", action="store_true",
                        help="run on plain CPython (baseline)")
    parser.add_argument("--no-exclusions", action="store_true",
                        help="run the excluded tests too")
    parser.add_argument("--exclusions", default=EXCLUSIONS, metavar="PATH",
                        help="the exclusion list (default: exclusions.txt here)")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--timeout", type=float, default=1500,
                        help="dump all tracebacks and exit after this many seconds")
    parser.add_argument("patterns", nargs="*")
    args = parser.parse_args(argv)

    faulthandler.enable()
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    version = sys.version_info[:2]
    patched = not args.no_patch
    if patched:
        import rdmaspawn

        rdmaspawn.patch()
        where = os.path.dirname(rdmaspawn.__file__)
    else:
        where = "(not imported: --no-patch)"
    instruments = Instruments(patched)
    instruments.preflight()

    import importlib

    module = importlib.import_module(MODULE)
    print(f"python {sys.version.split()[0]} ({sys.executable})")
    print(f"rdmaspawn {where}")
    print(f"{MODULE} {module.__file__}")
    sys.stdout.flush()

    exclusions = [] if args.no_exclusions else [
        e for e in load_exclusions(args.exclusions) if e.applies(version)]
    tests = list(iter_tests(unittest.defaultTestLoader.loadTestsFromModule(module)))
    if args.patterns:
        tests = [t for t in tests if any(
            fnmatch.fnmatchcase(t.id(), p if any(c in p for c in "*?[") else f"*{p}*")
            for p in args.patterns)]
    excluded = []
    for test in tests:
        for exc in exclusions:
            if exc.matches(test.id()):
                exc.matched += 1
                excluded.append(test.id())
                skip_test(test, f"rdmaspawn exclusion: {exc.reason}")
                break

    status = 0
    lower_fd_limit()
    # Some tests write files into the current directory, as under regrtest.
    start = time.monotonic()
    rerun = None
    with tempfile.TemporaryDirectory(prefix="rdmaspawn-conf-") as tmp:
        old_cwd = os.getcwd()
        os.chdir(tmp)
        try:
            runner = unittest.TextTestRunner(
                stream=sys.stdout, verbosity=2 if args.verbose else 1,
                resultclass=make_result_class(instruments))
            result = runner.run(unittest.TestSuite(tests))
            failed = [test.id() for test, _ in result.failures + result.errors]
            if failed:
                # As CPython's own CI does (regrtest --rerun): each failed
                # test once more, alone.  Several of these tests time a
                # child against a fixed sleep (test_leak_fast_process_del_killed
                # gives a SIGKILLed child 0.2 s to exit), which a loaded
                # machine can miss with or without rdmaspawn.
                print(f"\nrerunning {len(failed)} failed test(s) once: {' '.join(failed)}")
                sys.stdout.flush()
                rerun = runner.run(unittest.defaultTestLoader.loadTestsFromNames(failed))
        finally:
            os.chdir(old_cwd)
    elapsed = time.monotonic() - start
    faulthandler.cancel_dump_traceback_later()
    instruments.check("end of run")
    if not result.wasSuccessful() and not (rerun is not None and rerun.wasSuccessful()
                                           and rerun.testsRun == len(failed)):
        status = 1

    print()
    print(f"rdmaspawn conformance, python {version[0]}.{version[1]}: {result.testsRun} tests in "
          f"{elapsed:.0f}s, {len(result.failures)} failures, {len(result.errors)} errors, "
          f"{len(result.skipped)} skipped ({len(excluded)} by exclusions.txt)")
    if rerun is not None:
        print(f"  rerun alone: {rerun.testsRun} tests, {len(rerun.failures)} failures, "
              f"{len(rerun.errors)} errors"
              + (" (failed, then passed alone)" if status == 0 else ""))
    if patched:
        fallbacks = sum(c.calls for c in instruments.fallbacks)
        print(f"  patch in force: {'yes' if not instruments.violations else 'NO'}; "
              f"engine spawns: {instruments.engine.calls}; "
              f"CPython fork_exec fallbacks (preexec_fn): {fallbacks}")
        for v in instruments.violations[:10]:
            print(f"  PATCH NOT IN FORCE after {v}")
        if len(instruments.violations) > 10:
            print(f"  ... and {len(instruments.violations) - 10} more")
        if instruments.violations:
            status = 1
        if instruments.engine.calls < MIN_ENGINE_SPAWNS and not args.patterns:
            print(f"  too few engine spawns ({instruments.engine.calls} < {MIN_ENGINE_SPAWNS})")
            status = 1
        elif instruments.engine.calls < 2:
            print("  no spawn went through the engine")
            status = 1
    else:
        print("  rdmaspawn NOT in use (--no-patch)")
    if not args.patterns:
        for exc in exclusions:
            if not exc.matched:
                print(f"  stale exclusion (matches no test) at {args.exclusions}:{exc.lineno}: {exc.pattern}")
                status = 1
    print("  RESULT:", "PASS" if status == 0 else "FAIL")
    return status


if __name__ == "__main__":
    sys.exit(main())
