"""Test fixtures that ship with the package: ``hazard`` plants the real
MADV_DONTFORK hazard in a throwaway process (used by the test suite and by
``rdmaspawn demo``). Not part of the spawn API.
"""
