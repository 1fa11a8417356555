"""The native binding: the compiled core's functions as Python calls.

``engine`` is the thin cffi binding (``rs_spawn`` -> ``spawn()``, return
codes -> exceptions); ``capi`` loads the builtins written against the
Python C API (``csrc/python/``) as an extension module from the same file.
"""
