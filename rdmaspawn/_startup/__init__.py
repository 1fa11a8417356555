"""What runs when an interpreter or the package starts.

``sourcetree`` refuses a checkout without its compiled core (the package's
first import); ``switch`` parses ``RDMASPAWN``; ``autostart`` applies it from
the ``rdmaspawn-autostart.pth`` hook, deferring through ``onimport`` what
waits for a module's import. Kept empty: the hook's import passes through
here.
"""
