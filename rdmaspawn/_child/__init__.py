"""What the child does between clone and exec, declared instead of run as Python.

``model`` is :class:`ChildSetup` (the request, and a plain ``preexec_fn``
that does the same); ``pack`` turns it into ``struct rs_setup`` and spawns
with it; ``spawner`` is the long-lived thread that starts children with a
death signal; ``recognize`` finds the ``preexec_fn`` values that have a
declarative equivalent.
"""
