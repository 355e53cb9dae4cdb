"""Hang guards: the timeouts that only stop a test whose process or wait hangs.

A hang guard is not a bound the test asserts: it only keeps a stuck test from holding the
suite. ``python -m tests`` runs its parallel part at the lowest CPU priority beside the
timing tests, and on a 2-core machine a test there can be starved for minutes while a
serial test drives the CPU (a Scrapy start that takes 2 s alone took over 60 s so in CI).
That part sets ``SCALE_TEST_HANG_FACTOR`` and every guard is stretched by it; a timing
bound a test asserts never goes through ``hang_guard``.
"""

from __future__ import annotations

import math
import os

FACTOR_ENV = "SCALE_TEST_HANG_FACTOR"


def hang_factor() -> float:
    """``SCALE_TEST_HANG_FACTOR`` (1 when unset; a bad value is refused, not ignored)."""
    raw = os.environ.get(FACTOR_ENV, "").strip()
    if not raw:
        return 1.0
    value = float(raw)
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"{FACTOR_ENV}={raw!r}: a number >= 1")
    return value


def hang_guard(seconds: float) -> float:
    """``seconds`` stretched by the suite's hang factor."""
    return seconds * hang_factor()
