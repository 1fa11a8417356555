"""rdmaspawn._startup.onimport.when_imported: now for an imported module, else right after its import.

Fresh interpreters, so that the module watched is really not imported yet.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def fresh(code: str) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_after_the_import_and_before_the_importer_sees_it() -> None:
    out = fresh("""
        import inspect, json, sys
        from rdmaspawn._startup.onimport import _finder, when_imported
        seen = []
        out = {"now": when_imported("json", lambda m: seen.append(m.__name__)),
               "deferred": when_imported("wave", lambda m: seen.append(m.__name__ + ":" +
                                                                      str(hasattr(m, "open"))))}
        out["before_import"] = list(seen)
        import wave
        out["after_import"] = list(seen)
        out["finder_left"] = _finder in sys.meta_path
        out["source"] = "def open" in inspect.getsource(wave)   # the real loader answers
        print(json.dumps(out))
    """)
    assert out == {"now": True, "deferred": False, "before_import": ["json"],
                   "after_import": ["json", "wave:True"], "finder_left": False, "source": True}


def test_other_imports_pass_through() -> None:
    """While a function waits, every other module imports as usual, and only once it fires."""
    out = fresh("""
        import json
        from rdmaspawn._startup.onimport import when_imported
        calls = []
        when_imported("wave", calls.append)
        import csv, decimal
        import wave, importlib
        importlib.reload(wave)
        print(json.dumps({"calls": len(calls), "csv": csv.__spec__.loader.__class__.__name__}))
    """)
    assert out == {"calls": 1, "csv": "SourceFileLoader"}
