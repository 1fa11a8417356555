"""No circles among csrc/'s C files, read from what each one compiles to.

The C side of tests/test_import_graph.py's rule: two files that use each
other are one job split badly or a shared fact that wants its own home. A
file uses another where its object needs a symbol the other's defines (nm),
or where it includes the other's own header (X.h beside X.c): a header's
static inline functions leave no symbol behind. A header without a .c of the
same name (arch.h, rdmaspawn.h, binding.h, sigdisp.h) is shared, nobody's.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from test_c_harness import _cc, _require
from test_import_graph import circles

CSRC = Path(__file__).resolve().parent.parent / "csrc"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _sources() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*.c") if "arch" not in p.relative_to(CSRC).parts)


def _name(path: Path) -> str:
    return str(path.relative_to(CSRC))


def _symbols(cc: str, nm: str, source: Path, out: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) global symbols of source's object."""
    obj = out / (_name(source).replace("/", "_") + ".o")
    cmd = [cc, "-std=gnu11", "-O0", "-c", f"-I{CSRC}", f"-I{CSRC / 'python'}",
           f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(obj)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    res = subprocess.run([nm, "-P", "-g", str(obj)], capture_output=True, text=True,
                         timeout=60, check=True)
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        symbol, kind = line.split()[:2]
        (undefined if kind == "U" else defined).add(symbol)
    return defined, undefined


def _owned_headers(source: Path) -> set[str]:
    """The files whose own header source includes (X.h beside an X.c)."""
    used = set()
    for header in INCLUDE.findall(source.read_text()):
        for place in (source.parent, CSRC, CSRC / "python"):
            if (place / header).exists():
                owner = (place / header).with_suffix(".c")
                if owner.exists() and owner != source:
                    used.add(_name(owner))
                break
    return used


def c_graph(out: Path) -> dict[str, set[str]]:
    """Each C file of csrc/ -> the C files it uses."""
    cc = _cc()
    nm = _require(shutil.which("nm"), "nm (binutils)")
    sources = _sources()
    symbols = {_name(s): _symbols(cc, nm, s, out) for s in sources}
    owner = {sym: name for name, (defined, _) in symbols.items() for sym in defined}
    graph = {}
    for source in sources:
        name = _name(source)
        calls = {owner[sym] for sym in symbols[name][1] if sym in owner} - {name}
        graph[name] = calls | _owned_headers(source)
    return graph


def test_csrc_has_no_circle(tmp_path: Path) -> None:
    graph = c_graph(tmp_path)
    # The reader sees both kinds of edge, or an empty result would prove nothing:
    assert "setup.c" in graph["child.c"]  # a call (rs_setup_signals)
    assert "forkwatch.c" in graph["python/heldfork.c"]  # a call and an own header
    assert "child.c" in graph["report.c"]  # an own header only (struct rs_report)
    assert circles(graph) == []
