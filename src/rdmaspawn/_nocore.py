"""Why the C core does not import: the one message, true to the cause."""
from __future__ import annotations

import os
from typing import Any

__all__ = ["why_no_core"]


def _in_subinterpreter() -> bool:
    for name in ("_interpreters", "_xxsubinterpreters"):  # 3.13, 3.9-3.12
        try:
            interpreters: Any = __import__(name)
        except ImportError:
            continue
        return bool(interpreters.get_current() != interpreters.get_main())
    return False


def why_no_core(exc: ImportError) -> str:
    """What is true when the C core does not import: not built, or built but
    not loadable here (a subinterpreter: cffi modules are single-phase)."""
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))  # the package
    built = [f for f in os.listdir(here) if f.startswith("_rdmaspawn_cffi.")
             and f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))]
    if not built:
        return (f"rdmaspawn's C core is not built in {here}: install the package "
                "(pip install .) or build it in place (pip install -e .)")
    core = os.path.join(here, built[0])
    if _in_subinterpreter():
        return (f"rdmaspawn's C core ({core}) cannot be loaded in a subinterpreter: "
                "rdmaspawn works in the main interpreter only")
    return f"rdmaspawn's C core ({core}) is built but does not load: {exc}"
