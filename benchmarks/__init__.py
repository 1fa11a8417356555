"""The spawn benchmark: rdmaspawn side by side with CPython's paths and a C floor.

Run it as ``rdmaspawn bench`` or ``python -m rdmaspawn bench``; ``--help``
lists the options.  One module per job:

=============  ==========================================================
``cli``        the command line: measure or re-render, and write the files
``outdir``     where a run writes (never into ``/``)
``build``      compile the no-op child and the C floor (``noop.c``, ``floor.c``)
``spawners``   the spawners compared, each one spawn + wait
``measure``    one configuration, the spawners interleaved round by round
``sweep``      resident sizes times thread counts
``machine``    the facts about the machine, for the report
``model``      the report as dataclasses, and its JSON
``analysis``   ratios, growth per GiB, the targets and their thresholds
``table``      the plain-text report; ``readme``: the Markdown block; ``plot``: the PNG
``startup``    apart: what ``RDMASPAWN=on`` costs an interpreter's start-up
``sigint``     apart: what holding SIGINT costs a Popen() in the main thread
``cpucost``    apart: the parent's CPU per spawn, rdmaspawn / patch() / subprocess
=============  ==========================================================
"""
