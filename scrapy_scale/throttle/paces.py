"""Answers by pace: does a site refuse less when it is sent fewer requests?

Per site (and route), a small decayed histogram of its answers by the spacing they were
sent at (buckets of a quarter octave: each 19% slower than the one before), good and
refused. A rate limit refuses the fast paces and takes the slower ones; refusals tied to
something else (a path, a fault plan, a stray) come at any pace. A step up the throttle
took on a refusal is confirmed only when the refusal share at that pace and faster is
clearly above the share at slower paces; when slowing down did not lower it, the step
fades (see :mod:`scrapy_scale.throttle.policy`).

Plain data and arithmetic; the histogram is saved with the learned state and checked
when read back (:func:`check_paces`).
"""

from __future__ import annotations

import math
from typing import Any

#: buckets per octave of spacing
PER_OCTAVE = 4
#: answers for the counts to halve (a site's behaviour changes; old evidence fades)
HALF_LIFE = 100.0
#: what each answer leaves of the older counts
DECAY = 0.5 ** (1 / HALF_LIFE)
#: answers at slower paces needed before they can deny (or confirm) that refusals are the rate's
MIN_SLOWER = 5.0
#: within a run, "clearly above": this many times the share at the slower paces...
RATIO = 2.0
#: ...and above it by this much
GAP = 0.01
#: to carry a learned spacing into a new run, the slower paces must have got this many
#: standard deviations fewer refusals than at the share of the faster ones (about 1 in 40
#: for refusals that come at any pace)
Z = 2.0
#: refusals at slower paces (decayed counts) below which slowing down did stop them
NONE_SLOWER = 0.5
#: bucket numbers kept (spacings of about 1 ms to 1 day); counts read back are capped
LOWEST, HIGHEST = -40, 68
COUNT_CAP = 1e4
#: buckets read back, at most
MAX_BUCKETS = HIGHEST - LOWEST + 1

Paces = dict[int, list[float]]


def bucket(spacing: float) -> int:
    """The bucket of a spacing (seconds)."""
    b = math.floor(math.log2(max(spacing, 1e-3)) * PER_OCTAVE)
    return min(max(b, LOWEST), HIGHEST)


def record(paces: Paces, spacing: float, refused: bool) -> None:
    """One answer at ``spacing``: older counts decay by one answer's worth."""
    for counts in paces.values():
        counts[0] *= DECAY
        counts[1] *= DECAY
    counts = paces.setdefault(bucket(spacing), [0.0, 0.0])
    counts[1 if refused else 0] += 1.0
    for b in [b for b, c in paces.items() if c[0] + c[1] < 0.01]:
        del paces[b]


def _split(paces: Paces, b: int, at_slower: bool) -> tuple[float, float, float, float]:
    """(answers, refused) faster and slower than a split: at ``b`` itself, on the slower side
    when ``at_slower``, else on the faster side."""
    n_f = r_f = n_s = r_s = 0.0
    for k, (good, refused) in paces.items():
        if k > b or (at_slower and k == b):
            n_s, r_s = n_s + good + refused, r_s + refused
        else:
            n_f, r_f = n_f + good + refused, r_f + refused
    return n_f, r_f, n_s, r_s


def rate_tied(paces: Paces, spacing: float, *, at_slower: bool = False, strict: bool = False) -> bool | None:
    """Are refusals the rate's doing, split at ``spacing``? True when the refusal share at
    that pace and faster is clearly above the share at slower paces (``at_slower``: the
    share faster than that pace against the share at it and slower); False when slowing
    down did not lower it; None while too few answers came on either side to tell.
    ``strict``: "clearly above" is a significant difference (:data:`Z`), not a ratio (a few
    answers by luck must not carry a spacing into the next run)."""
    n_f, r_f, n_s, r_s = _split(paces, bucket(spacing), at_slower)
    if n_s < MIN_SLOWER or n_f <= 0:
        return None
    if r_s < NONE_SLOWER:
        return True  # slower paces were not refused: the refusals are the rate's
    if not strict:
        return r_f / n_f > RATIO * r_s / n_s + GAP
    expected = n_s * r_f / n_f
    return expected - r_s > Z * math.sqrt(expected)


def export_paces(paces: Paces) -> dict[str, list[float]]:
    return {str(b): [round(c[0], 3), round(c[1], 3)] for b, c in paces.items()}


def check_paces(raw: Any) -> tuple[Paces, str | None]:
    """The histogram as read back from shared state: usable buckets kept (counts capped),
    unusable ones dropped; ``why`` says what was wrong (None: nothing)."""
    if raw is None:
        return {}, None
    if not isinstance(raw, dict):
        return {}, f"answers by pace {str(raw)[:40]!r} are not a record; dropped"
    paces: Paces = {}
    why = None
    for k, v in list(raw.items())[: MAX_BUCKETS * 2]:
        try:
            b = int(k)
            good, refused = (float(x) for x in v)
        except (TypeError, ValueError, OverflowError):
            why = why or f"answers by pace {k!r}: {str(v)[:40]!r} unusable; dropped"
            continue
        if not (LOWEST <= b <= HIGHEST and math.isfinite(good) and math.isfinite(refused)):
            why = why or f"answers by pace {k!r}: {str(v)[:40]!r} unusable; dropped"
            continue
        if good < 0 or refused < 0:
            why = why or f"answers by pace {k!r}: negative counts; dropped"
            continue
        if good > COUNT_CAP or refused > COUNT_CAP:
            why = why or f"answers by pace {k!r}: counts above {COUNT_CAP:g}; capped"
        paces[b] = [min(good, COUNT_CAP), min(refused, COUNT_CAP)]
    if len(raw) > MAX_BUCKETS * 2:
        why = why or f"answers by pace: {len(raw)} buckets; the first {MAX_BUCKETS * 2} read"
    return paces, why
