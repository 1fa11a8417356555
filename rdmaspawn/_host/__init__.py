"""The process and its interpreter as the host shows them.

``procfs`` is the one reader of ``/proc`` (mappings, DONTFORK, libraries,
capabilities); ``interpreter`` starts a helper ``sys.executable`` that
imports this same rdmaspawn.
"""
