"""rdmaspawn's public functions as a type checker sees them.

``rdmaspawn.Popen``, ``run``, ``call``, ``check_call`` and ``check_output``
take CPython's arguments plus rdmaspawn's setup keywords; their types come
from ``rdmaspawn/dropin/signatures.pyi`` (written by ``scripts/subprocess-stub``
from typeshed's ``subprocess.pyi``). The stub must name exactly the keywords
Popen accepts at run time, and the arguments of this CPython's subprocess;
mypy must reject a wrong type for either kind and infer str or bytes as it
does for subprocess.
"""
from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Read from the source, not imported: CI's lint step runs this module with
# mypy and pytest only, where rdmaspawn is not built.
ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "rdmaspawn" / "dropin" / "signatures.pyi"


def _popen_keywords() -> dict[str, str]:
    """rdmaspawn.Popen's setup keywords -> the build() parameter each sets
    (setupkeywords._POPEN_KWARGS)."""
    source = ROOT / "rdmaspawn" / "dropin" / "setupkeywords.py"
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_POPEN_KWARGS" for t in node.targets):
            return dict(ast.literal_eval(node.value))
    raise AssertionError(f"{source} has no _POPEN_KWARGS")


def _build_types() -> dict[str, tuple[str, str]]:
    """rdmaspawn._child.model.build()'s keywords -> (annotation, default)."""
    tree = ast.parse((ROOT / "rdmaspawn" / "_child" / "model.py").read_text())
    build = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build")
    return {a.arg: (ast.unparse(a.annotation), ast.unparse(d))
            for a, d in zip(build.args.kwonlyargs, build.args.kw_defaults)
            if a.annotation is not None and d is not None}


def _this_versions_defs(body: list[ast.stmt], name: str) -> list[ast.FunctionDef]:
    """The ``def name`` overloads of ``body`` that apply to the running Python
    (``if sys.version_info ...`` chains evaluated)."""
    found: list[ast.FunctionDef] = []
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            found.append(node)
        elif isinstance(node, ast.If):
            test = eval(compile(ast.Expression(node.test), str(STUB), "eval"), {"sys": sys})
            found.extend(_this_versions_defs(node.body if test else node.orelse, name))
    return found


def _stub_defs(name: str) -> list[ast.FunctionDef]:
    tree = ast.parse(STUB.read_text())
    if name == "Popen":
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Popen")
        return _this_versions_defs(cls.body, "__init__")
    return _this_versions_defs(tree.body, name)


def _names(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg != "self"]


@pytest.mark.parametrize("name", ["Popen", "run", "call", "check_call", "check_output"])
def test_stub_takes_cpythons_arguments_and_rdmaspawns_keywords(name: str) -> None:
    """Every overload names this CPython's parameters, in CPython's order and
    kind, then exactly the keywords rdmaspawn.Popen folds into its setup."""
    defs = _stub_defs(name)
    assert defs, f"signatures.pyi has no {name} for this Python"
    target = subprocess.Popen.__init__ if name == "Popen" else getattr(subprocess, name)
    cpython = [p for p in inspect.signature(target).parameters.values()
               if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"]
    positional = [p.name for p in cpython if p.kind == p.POSITIONAL_OR_KEYWORD]
    keywords = _popen_keywords()
    extra = list(keywords)
    build = _build_types()
    for fn in defs:
        names = _names(fn)
        assert names[-len(extra):] == extra, ast.dump(fn.args)[:200]
        # typed and defaulted as build() takes them: rerun scripts/subprocess-stub
        typed = {a.arg: (ast.unparse(a.annotation), ast.unparse(d))
                 for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults)
                 if a.arg in keywords and a.annotation is not None and d is not None}
        assert typed == {k: build[field] for k, field in keywords.items()}
        # run() & co. take **other_popen_kwargs at run time: the stub names
        # Popen's keywords there, as typeshed does.
        assert set(p.name for p in cpython) <= set(names[:-len(extra)])
        if name == "Popen":
            # Positionally, CPython's order up to preexec_fn at least (typeshed
            # makes the later ones keyword-only in the overloads that key on
            # them, e.g. universal_newlines=True).
            stub_positional = [a.arg for a in fn.args.args if a.arg != "self"]
            assert stub_positional == positional[:len(stub_positional)]
            assert len(stub_positional) > positional.index("preexec_fn")


def _mypy(tmp_path: Path, code: str) -> list[str]:
    api = pytest.importorskip("mypy.api")
    config = tmp_path / "mypy.ini"
    # Not the project's config (its files and overrides); the checkout's
    # rdmaspawn by its path (an editable install's import hook is invisible
    # to mypy), whose own errors are not this test's.
    config.write_text(f"[mypy]\nmypy_path = {ROOT}\n")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(code))
    out, err, _ = api.run(["--strict", "--follow-imports=silent", "--no-incremental",
                           "--config-file", str(config), "--cache-dir", os.devnull,
                           str(snippet)])
    assert not err, err
    return [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(snippet))]


def test_mypy_rejects_wrong_types_and_infers_text_mode(tmp_path: Path) -> None:
    found = _mypy(tmp_path, """
        import signal
        import rdmaspawn

        rdmaspawn.Popen(["true"], nice=5, pdeathsig=signal.SIGTERM, cgroup="/sys/fs/cgroup/x")
        rdmaspawn.Popen(["true"], nice="high")
        rdmaspawn.run(["true"], bufsize="big")
        reveal_type(rdmaspawn.run(["true"], capture_output=True, text=True).stdout)
        reveal_type(rdmaspawn.check_output(["true"], rlimits={0: (1, 2)}))
        reveal_type(rdmaspawn.Popen(["true"], encoding="utf-8").pidfd)
        rdmaspawn.guard(3)
    """)
    errors = [line.rsplit("  [", 1)[0] for line in found if line.startswith("error:")]
    assert errors == [
        'error: No overload variant of "Popen" matches argument types "list[str]", "str"',
        'error: No overload variant of "run" matches argument types "list[str]", "str"',
        'error: Argument 1 to "guard" has incompatible type "int"; expected "str"',
    ], found
    reveals = [line.replace("builtins.", "") for line in found
               if line.startswith("note: Revealed type")]
    assert reveals == ['note: Revealed type is "str"', 'note: Revealed type is "bytes"',
                       'note: Revealed type is "int | None"'], found

