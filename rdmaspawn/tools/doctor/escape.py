"""Text taken from other processes, made safe to print on a terminal.

A command line, a file name or an environment value is whoever started that
process's: printed raw, its control codes could retitle root's terminal or
erase a HAZARD line (``--json`` needs nothing: json.dumps escapes them).
"""

from __future__ import annotations

__all__ = ["printable"]

# os.fsdecode() turns a byte that is not UTF-8 into a lone surrogate (PEP 383).
_SURROGATE_ESCAPES = range(0xDC80, 0xDD00)


def printable(text: str) -> str:
    """``text`` with each non-printable character (C0 and C1 controls, DEL,
    format characters such as bidi overrides, undecodable bytes) as a Python
    escape: ``\\x1b``, ``\\u202e``; the ordinary space is kept."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code in _SURROGATE_ESCAPES:
        return f"\\x{code - 0xDC00:02x}"  # the original byte
    # ascii() writes \t, \n and \r by name; \xNN for every byte keeps one form.
    return f"\\x{code:02x}" if code <= 0xFF else ascii(ch)[1:-1]
