"""The spawn benchmark: rdmaspawn side by side with CPython's paths and a C floor.

Run it as ``rdmaspawn bench`` (``--help`` lists the options); ``cli`` measures
or re-renders a record through the modules below it, one job each, each
saying its job at its top.  ``startup``, ``sigint``, ``cpucost``,
``guardcost``, ``markcost`` and ``repaircost`` are benchmarks of their own,
each run as ``python -m rdmaspawn.bench.NAME``.
"""
