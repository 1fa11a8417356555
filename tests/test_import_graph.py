"""No circles among the package's modules, read from the source.

Two modules that import each other are one job split badly or a shared fact
that wants its own home, and a circle can hide a bug (an ``unpatch()`` that
reset a start method it never set). The graph is built with ``ast`` from every
import statement, at module level or inside a function (a deferred import
only hides a circle from the interpreter), and any strongly connected group
of more than one module, or a module importing itself, fails.

``from package import name`` counts as importing ``package.name`` where that
is a module, else ``package`` itself. The implicit import of a module's
parent packages does not count: every submodule has it.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Source directory -> the package name it installs as.
PACKAGES = {ROOT / "rdmaspawn": "rdmaspawn", ROOT / "benchmarks": "rdmaspawn.bench"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top, name in PACKAGES.items():
        # A compiled module counts by its stub (rdmaspawn._rdmaspawn_cffi).
        stubs = [p for p in top.rglob("*.pyi") if not p.with_suffix(".py").exists()]
        for path in [*top.rglob("*.py"), *stubs]:
            parts = list(path.relative_to(top).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield sub if sub in known else source


def import_graph() -> dict[str, set[str]]:
    """Each of the package's modules -> the package's modules it imports."""
    known = _modules()
    return {m: {i for i in _imports(m, p, known) if i in known} for m, p in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups that are circles (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_circle() -> None:
    assert circles(import_graph()) == []


#: DEVELOPERS.md's layers, lowest first: a module imports from its own layer
#: or lower ones only. A module's layer is that of the longest entry that is
#: the module or a package above it.
LAYERS: list[tuple[str, ...]] = [
    # the core: the binding, the child's setup, /proc, what starts first, the
    # public helpers over them
    ("rdmaspawn._rdmaspawn_cffi", "rdmaspawn._native", "rdmaspawn._child", "rdmaspawn._host",
     "rdmaspawn._startup", "rdmaspawn.preexec", "rdmaspawn.ptyspawn"),
    ("rdmaspawn.dropin",),
    # below the tools: the core and the drop-ins only
    ("rdmaspawn.testing",),
    ("rdmaspawn.tools",),
    # the benchmark measures the tools too (guardcost times the guard)
    ("rdmaspawn.bench",),
    # the entry points: the package itself, its CLI, the .pth hook's module
    ("rdmaspawn", "rdmaspawn.__main__", "rdmaspawn._startup.autostart"),
]


def _layer(module: str) -> tuple[int, str]:
    """(rank, entry) of the longest LAYERS entry that ``module`` is or lies under."""
    found = [(len(entry), rank, entry) for rank, entries in enumerate(LAYERS)
             for entry in entries if module == entry or module.startswith(entry + ".")]
    _, rank, entry = max(found)
    assert entry != "rdmaspawn" or module == entry, f"{module} is in no layer: add it to LAYERS"
    return rank, entry


def test_imports_go_down_the_layers() -> None:
    graph = import_graph()
    upward = []
    for module, imported in graph.items():
        rank, entry = _layer(module)
        for other in imported:
            other_rank, other_entry = _layer(other)
            if other_rank > rank:
                upward.append(f"{module} -> {other}")
    assert sorted(upward) == []


def test_the_graph_sees_relative_deferred_and_from_imports() -> None:
    """The reader is what the first test trusts: it must see the package's
    known edges of each kind, or an empty result would prove nothing."""
    graph = import_graph()
    # relative, module level, `from . import module`
    assert "rdmaspawn._startup.sourcetree" in graph["rdmaspawn"]
    # relative, inside a function (the CLI's lazy subcommands)
    assert "rdmaspawn.tools.run" in graph["rdmaspawn.__main__"]
    # two dots up, `from ..package.module import name`
    assert "rdmaspawn._host.procfs" in graph["rdmaspawn.tools.doctor.scan"]
    # the benchmark, under its installed name
    assert "rdmaspawn.bench.model" in graph["rdmaspawn.bench.cli"]


def test_a_circle_is_found() -> None:
    """Two modules through a third, and a module importing itself."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"a"}}) == [["a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_first_spawns_deferred_imports_are_absolute() -> None:
    """What autostart defers to the first spawn or fork imports by absolute
    name: it runs in any thread, maybe while another imports the same module,
    and CPython 3.9.2 (Debian 11) let a relative ``from ..dropin.patch import
    patch`` through to the other thread's partially initialized module, where
    an absolute one waits for it (issue 48, item 2;
    test_autostart.py::test_an_import_of_the_patch_during_the_first_spawn_is_no_deadlock
    fails there with {'patched': False})."""
    path = ROOT / "rdmaspawn" / "_startup" / "autostart.py"
    relative = [f"line {node.lineno}"
                for fn in ast.walk(ast.parse(path.read_text()))
                if isinstance(fn, ast.FunctionDef)
                for node in ast.walk(fn)
                if isinstance(node, ast.ImportFrom) and node.level]
    assert relative == []
