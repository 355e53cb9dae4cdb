"""``Retry-After`` parsing (RFC 9110 §10.2.3): delta-seconds or an HTTP-date.

Pure functions; the caller passes the current time. A value that cannot be
parsed counts as absent (``None``) and is logged at debug level. Clamping of
negative or huge delays is the retry policy's job (it knows the cap).
"""

from __future__ import annotations

import logging
import math
import re
from datetime import UTC
from email.utils import parsedate_to_datetime

logger = logging.getLogger(__name__)

_DELTA = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*$")


def parse_retry_after(value: str | bytes | None, now: float) -> float | None:
    """Seconds to wait from ``now`` (may be negative for a date in the past), or None.

    Accepts delta-seconds (``120``; a decimal fraction and a sign are tolerated, a
    negative value is returned as is so the policy can clamp it loudly) and the
    three HTTP-date forms (IMF-fixdate, RFC 850, asctime; a date without zone is UTC).
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
            return None
    text = value.strip()
    if not text:
        logger.debug("Retry-After header is empty; ignored")
        return None
    m = _DELTA.match(text)
    if m:
        return float(m.group(1))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        logger.debug("Retry-After %r is neither delta-seconds nor an HTTP-date; ignored", text[:64])
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return when.timestamp() - now
    except (OverflowError, OSError, ValueError):
        logger.debug("Retry-After %r is out of range; ignored", text[:64])
        return None


def largest_retry_after(values: list[bytes] | list[str], now: float) -> tuple[float | None, str | None]:
    """Of several ``Retry-After`` headers (a response may repeat it), the longest wait
    and its text as sent; ``(None, None)`` when none parses. Headers that cannot be
    parsed are skipped; with none parsable the last one's text is kept (shown as sent).
    The largest, not the last: a site that says two things asked for the longer wait."""
    best: tuple[float | None, str | None] = (None, None)
    last_text = None
    for raw in values:
        text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        last_text = text
        v = parse_retry_after(text, now)
        if v is not None and (best[0] is None or v > best[0]):
            best = (v, text)
    return best if best[0] is not None else (None, last_text)


def clamp_retry_after(seconds: float | None, cap: float) -> float | None:
    """A parsed Retry-After made safe to act on: None when absent or not a finite number,
    0 for a time in the past, at most ``cap`` (``SCALE_RETRY_AFTER_MAX``). Silent: the
    retry policy warns about the values it clamps (:meth:`RetryPolicy.clamp_retry_after`)."""
    if seconds is None or not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), cap)
