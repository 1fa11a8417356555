"""The drop-ins: CPython's spawn primitives and ``Popen`` rebuilt on the engine.

``forkexec`` (``_posixsubprocess.fork_exec``), ``posixspawn``
(``Popen._posix_spawn``), ``spawnv`` (``os.spawn*``), ``popen`` (``Popen`` and
the module functions) and ``patch`` (which installs them in the standard
library). ``cpython`` is the table of CPython's private internals they adapt
to, ``wrapping`` the ``__wrapped__`` chains that patch() and guard() share.
They import the core (``rdmaspawn._native``, ``._child``, ``._host``) and
nothing above it.
"""
