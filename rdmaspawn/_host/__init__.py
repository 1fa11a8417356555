"""The process and its interpreter as the host shows them.

``procfs`` reads ``/proc`` (mappings, DONTFORK, libraries), ``processinfo``
the rest a tool asks about a process (capabilities, command line, ...),
``glibcheap`` tells glibc's thread heaps; ``interpreter`` starts a helper ``sys.executable`` that
imports this same rdmaspawn.
"""
