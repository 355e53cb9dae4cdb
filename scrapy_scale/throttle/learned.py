"""A site's learned pacing as read back from shared state (a file, Redis): checked.

What is read back is untrusted input: a value that is not a finite number, negative, or
far in the future is repaired or not used, and the caller warns once.
"""

from __future__ import annotations

import math
from typing import Any

#: seconds a time read back from shared state may be ahead of ours (clocks of workers differ)
FUTURE_SLACK = 60.0


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def check_learned(raw: Any, now: float, max_spacing: float = math.inf) -> tuple[dict[str, float] | None, str | None]:
    """A site's learned state as read back from shared state (a file, Redis), checked.

    Returns ``(state, None)`` when usable; ``(state, why)`` when something was repaired
    (a time in the future is brought back to ``now``, an unusable too-fast or proven
    spacing is dropped: not a finite number, negative, or above ``max_spacing``, the
    profile's ``max_delay``, which would pin the site at ``max_delay`` for days while the
    memory fades); ``(None, why)`` when the delay or its time is missing, not a number,
    infinite, NaN or negative: the state is not used at all."""
    if not isinstance(raw, dict):
        return None, f"not a record: {str(raw)[:40]!r}; not used"
    delay, at = _finite(raw.get("delay")), _finite(raw.get("at"))
    if delay is None or delay < 0:
        return None, f"delay {raw.get('delay')!r} is not a finite number of seconds; not used"
    if at is None:
        return None, f"time {raw.get('at')!r} is not a finite time; not used"
    why = None
    if at > now + FUTURE_SLACK:
        why, at = f"time {at:.0f} is in the future; taken as now", now
    tf, tf_at = _finite(raw.get("too_fast", 0.0)), _finite(raw.get("too_fast_at", at))
    if tf is None or tf < 0 or tf_at is None:
        why, tf, tf_at = why or f"too-fast spacing {raw.get('too_fast')!r} is unusable; dropped", 0.0, 0.0
    elif tf > max_spacing:
        why, tf, tf_at = why or f"too-fast spacing {tf:.6g} s is above max_delay {max_spacing:g} s; dropped", 0.0, 0.0
    elif tf_at > now:
        tf_at = now  # its memory would never fade
    proven = _finite(raw.get("proven", 0.0))
    if proven is None or proven < 0:
        why, proven = why or f"proven spacing {raw.get('proven')!r} is unusable; dropped", 0.0
    elif proven > max_spacing:
        why, proven = why or f"proven spacing {proven:.6g} s is above max_delay {max_spacing:g} s; dropped", 0.0
    settled = _finite(raw.get("settled", tf))  # older records: all of it confirmed
    if settled is None or settled < 0:
        why, settled = why or f"confirmed spacing {raw.get('settled')!r} is unusable; all confirmed", tf
    state = {"delay": delay, "at": at, "too_fast": tf, "too_fast_at": tf_at, "proven": proven, "settled": settled}
    return state, why
