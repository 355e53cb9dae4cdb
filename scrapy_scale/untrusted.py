"""Reading back values from shared state (Redis keys, SQLite files, files on disk), which
are untrusted: helpers the packages' checks share."""

from __future__ import annotations

import math
from typing import Any


def as_finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (not a number, NaN, an infinity, too large)."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None
