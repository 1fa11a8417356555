"""The drop-ins: CPython's spawn primitives and ``Popen`` rebuilt on the engine.

``forkexec`` (``_posixsubprocess.fork_exec``), ``posixspawn``
(``Popen._posix_spawn``), ``spawnv`` (``os.spawn*``), ``popen`` (``Popen`` and
the module functions) and ``patch`` (which installs them in the standard
library). They import the core (``rdmaspawn._engine``, ``._cpython``,
``._procfs``) and nothing above it.
"""
