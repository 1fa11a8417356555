"""The user tools: ``doctor`` (is this process safe to fork?), ``guard`` (catch a
fork before it happens) and ``demo`` (the hazard, live). They import the core
and the drop-ins; nothing imports them but ``rdmaspawn`` (lazily) and the CLI.
"""
