"""The typing stub of the cffi module says what the module holds.

mypy checks the binding against ``_rdmaspawn_cffi.pyi``, a hand-written file:
a C declaration that changes without it would be typed wrongly and still pass
mypy. These compare the stub with the built module: the same names on ``lib``,
each function taking as many arguments as its C declaration, and the structs'
fields.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from rdmaspawn import _rdmaspawn_cffi
from rdmaspawn._rdmaspawn_cffi import ffi, lib

STUB = Path(_rdmaspawn_cffi.__file__).with_name("_rdmaspawn_cffi.pyi")
# The stub's struct classes and the C structs they type.
STRUCTS = {"RsResult": "struct rs_result", "RsSetup": "struct rs_setup"}


def _stub_classes() -> dict[str, ast.ClassDef]:
    tree = ast.parse(STUB.read_text())
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _attributes(cls: ast.ClassDef) -> set[str]:
    return {node.target.id for node in cls.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


def _c_function(value: object) -> Any:
    """cffi's type of a C function on lib, else None (a constant, a variable)."""
    try:
        c_type = ffi.typeof(value)  # type: ignore[arg-type]
    except TypeError:  # a Python int: an enum constant
        return None
    return c_type if c_type.kind == "function" else None


def test_the_stub_names_what_lib_holds() -> None:
    """Every name on lib is in the stub's Lib, and the stub names nothing lib lacks."""
    lib_stub = _stub_classes()["Lib"]
    stub_names = _attributes(lib_stub) | set(_methods(lib_stub))
    assert stub_names == set(dir(lib)), {
        "in lib, not in the stub": sorted(set(dir(lib)) - stub_names),
        "in the stub, not in lib": sorted(stub_names - set(dir(lib))),
    }


def test_the_stub_functions_take_the_c_arguments() -> None:
    """Each function in the stub takes as many positional arguments as cffi's
    type of it (its C declaration), and each C function is a method there."""
    methods = _methods(_stub_classes()["Lib"])
    for name in dir(lib):
        c_type = _c_function(getattr(lib, name))
        if c_type is None:
            assert name not in methods, f"{name} is not a function in lib"
            continue
        assert name in methods, f"{name} is a function in lib, not a method in the stub"
        args = methods[name].args
        stub_arity = len(args.posonlyargs) + len(args.args) - 1  # less self
        assert stub_arity == len(c_type.args), (name, stub_arity, len(c_type.args))


def test_the_stub_structs_have_the_c_fields() -> None:
    """The stub's struct classes have exactly the C structs' fields."""
    classes = _stub_classes()
    for stub_name, c_name in STRUCTS.items():
        c_fields = {field for field, _ in ffi.typeof(c_name).fields}
        assert _attributes(classes[stub_name]) == c_fields, stub_name
