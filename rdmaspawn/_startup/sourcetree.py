"""Refuse, in one line, to run from a source tree that has no compiled core.

Importing a checkout without ``_rdmaspawn_cffi*.so`` fails with a plain
ImportError that says nothing. Under site.py only the core's file is
checked, not its load: cffi's backend would cost every interpreter.
"""
# No `from __future__ import annotations`: it is an import of __future__ in every
# interpreter RDMASPAWN starts; annotations 3.9 cannot evaluate are quoted.
import _imp
import os
import sys

__all__ = ["imported_by_site", "require_core"]

#: The package directory (this module sits in its _startup/).
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _installed_elsewhere(root: str) -> "str | None":
    """Where another rdmaspawn is installed on sys.path, if anywhere."""
    import importlib.machinery  # only once the core has failed to load

    paths = [p for p in sys.path
             if p and os.path.abspath(p) != root]
    spec = importlib.machinery.PathFinder.find_spec("rdmaspawn", paths)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _explain(exc: "ImportError") -> str:
    import glob  # only once the core has failed to load

    built = glob.glob(os.path.join(_HERE, "_rdmaspawn_cffi*.so"))
    if built:
        # The core is there but does not load (a subinterpreter, a wheel for
        # another machine, a missing libc symbol): the original error says why.
        return f"rdmaspawn's C core {built[0]} does not load: {exc}"
    root = os.path.dirname(_HERE)
    if not os.path.exists(os.path.join(root, "setup.py")):
        return (f"rdmaspawn's C core is missing from {_HERE}: the installation is "
                "incomplete; reinstall it (pip install --force-reinstall rdmaspawn)")
    other = _installed_elsewhere(root)
    if other is not None:
        return (f"rdmaspawn: this is the source tree {root}, which has no compiled core, "
                f"and it shadows the rdmaspawn installed in {other}: start Python outside "
                "the checkout, or build the checkout in place with: pip install -e .")
    return (f"rdmaspawn: this is the source tree {root}, which has no compiled core: "
            "build it in place with: pip install -e . (or install rdmaspawn and start "
            "Python outside the checkout)")


def imported_by_site() -> bool:
    """Whether site.py is importing the package (the .pth hook, a sitecustomize)."""
    spec = getattr(sys.modules.get("site"), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _built() -> bool:
    """Whether the compiled core's file is in the package (without loading it)."""
    return any(os.path.exists(os.path.join(_HERE, "_rdmaspawn_cffi" + suffix))
               for suffix in _imp.extension_suffixes())


def require_core() -> None:
    """Import the compiled core, both its modules (the cffi one and the
    extension in the same file, csrc/python/); an ImportError that says what
    to do if it fails."""
    try:
        from .._native import capi  # noqa: F401
    except ImportError as exc:
        raise ImportError(_explain(exc)) from exc


if not imported_by_site():
    require_core()
elif not _built():
    raise ImportError(_explain(ImportError("no compiled core")))
