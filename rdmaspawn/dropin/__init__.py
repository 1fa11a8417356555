"""The drop-ins: CPython's spawn primitives and ``Popen`` rebuilt on the engine
(DEVELOPERS.md maps the modules); they import the core and nothing above it."""
