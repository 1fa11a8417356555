"""Small numeric helpers shared by the measurement and the reports."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

GiB = 1 << 30


def log(msg: str) -> None:
    """Progress goes to stderr so that stdout holds only the report."""
    print(msg, file=sys.stderr, flush=True)


def quantile(sorted_xs: Sequence[float], q: float) -> float | None:
    """The q-quantile by linear interpolation (numpy's default); None when empty."""
    if not sorted_xs:
        return None
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None where either is missing or b is not positive."""
    if a is None or b is None or b <= 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def fmt_gib(gib: float) -> str:
    return f"{gib:g} GiB"


def fmt_us(us: float | None, micro: str = "us") -> str:
    """A latency in the unit that reads best: "115 us", "13.9 ms", "314 ms"."""
    if us is None or math.isnan(us):
        return "-"
    if us < 1_000:
        return f"{us:.0f} {micro}"
    places = 0 if us >= 100_000 else 1 if us >= 10_000 else 2  # three digits
    return f"{us / 1000:.{places}f} ms"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"
