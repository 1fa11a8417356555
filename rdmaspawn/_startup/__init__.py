"""What runs when an interpreter or the package starts (DEVELOPERS.md maps the
modules). Kept empty: the hook's import passes through here."""
