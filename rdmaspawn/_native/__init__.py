"""The native binding: the compiled core's functions as Python calls.

``engine`` is the thin cffi binding (``rs_spawn`` -> ``spawn()``, return
codes -> exceptions); ``capi`` fetches the builtins written against the
Python C API (``csrc/python/``) from the same module.
"""
