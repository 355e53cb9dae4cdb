"""What the throttle knows about one site (or one route): :class:`SiteState`.

Plain data; the decisions on it are in :mod:`scrapy_scale.throttle.policy` (rules) and :mod:`scrapy_scale.throttle.pacing`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.throttle.profiles import Match

#: good answers between two forgiven refusals, at least (more often is a rate, not strays)
FORGIVE_EVERY = 100


@dataclass
class SiteState:
    """What is known about one site (one pacing key)."""

    key: str
    match: Match
    delay: float
    #: the largest spacing the site said was too fast (0: none), as of ``too_fast_at``
    too_fast: float = 0.0
    too_fast_at: float = 0.0
    #: the part of ``too_fast`` that is confirmed (the rest: small steps not confirmed yet),
    #: and the highest it was stepped to since; both as of ``too_fast_at``
    settled: float = 0.0
    peak: float = 0.0
    #: the last slow-down (answers to requests sent before it do not slow down again)
    slowed_at: float = -math.inf
    #: good answers since the last slow-down, and since the last pause began
    good_since_slowed: int = 0
    good_since_pause: int = 0
    #: the spacing of the last run of PROVEN_AFTER_GOOD good answers since a slow-down (0: none)
    proven: float = 0.0
    #: good answers since the last rate-limited answer (forgiven or not), seen by this process
    good_since_refused: int = 0
    #: good answers since the last refusal that was forgiven (none yet: as many as needed)
    good_since_forgiven: int = FORGIVE_EVERY
    #: moving share of recent answers that were rate limited (0..1)
    refused_share: float = 0.0
    #: the current pause already excused the refusal of its first request
    pause_excused: bool = False
    #: the fastest pace proven (STEP_AFTER_GOOD good answers in a row; 0: none): a refusal
    #: far slower than it is no sign of the rate, unless refusals are frequent
    fastest_ok: float = 0.0
    #: moving share of recent answers that said "overloaded" (503 without Retry-After)
    overload_share: float = 0.0
    #: answers by the pace they were sent at (bucket: [good, refused], decayed; see
    #: :mod:`scrapy_scale.throttle.paces`), and the spacing of the last slow-down (answers to
    #: requests sent before it count at that pace)
    paces: dict[int, list[float]] = field(default_factory=dict)
    slowed_spacing: float = 0.0

    #: the spacing requests were sent at since the last refusal (seconds summed, requests)
    cycle_time: float = 0.0
    cycle_sent: int = 0
    #: the spacing of the previous cycle between two refusals (0: none yet, or it was short)
    last_cycle: float = 0.0

    paused_until: float = 0.0
    #: when ``paused_until`` last moved (exported for `scrapy scale status`)
    paused_at: float = 0.0
    last_sent: float = -math.inf
    #: when the last request handed out to it ended (its answer came, or it was dropped)
    last_answer: float = -math.inf
    #: moving average of the spacing between requests handed out
    gap: float | None = None
    inflight: int = 0
    #: robots.txt Crawl-delay (seconds), when known
    crawl_delay: float | None = None
    #: the largest ``DOWNLOAD_SLOTS`` delay of the site's hosts seen (0: none): a floor
    slot_delay: float = 0.0
    #: the delay was learned (changed by an answer, or restored), not the start delay
    learned: bool = False
    #: last time the learned state changed (for sharing: newest wins)
    changed_at: float = 0.0
    # counters (stats)
    sent: int = 0
    rate_limited: int = 0
    paused_seconds: float = 0.0

    @property
    def profile(self) -> Any:
        return self.match.profile
