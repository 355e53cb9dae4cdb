"""The figures of one probe step, from its answers (plain Python, no clock, no network).

A step's answers are :class:`Answer` records (when sent, when answered, the failure class
the classifier gave, whether the server asked to wait). :func:`summarise` drops the
answers to requests sent in the step's first ``warmup`` seconds (the ramp up to the
step's concurrency) and turns the rest into :class:`StepFigures`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: the classes that are the site refusing the load, not a page that failed
RATE_LIMITED = "rate_limited"
BLOCKED = "blocked"
OK = "ok"
#: answers that count as goodput (a 404 is a good answer of the site, not a failure of load)
GOOD = frozenset({"ok", "not_found"})
#: the statuses that refuse a request: with one of them, and only then, ``Retry-After`` asks
#: the probe to slow down (a 200 that carries one is a good answer; some servers add it to
#: every answer)
REFUSAL_STATUSES = frozenset({429, 503})


def refusal(cls: str, status: int | None, retry_after: bool) -> bool:
    """Is an answer the site refusing the load: a ``rate_limited`` one, a 429, or a 503 with
    ``Retry-After`` (a ``Retry-After`` on any other status is not a refusal)?"""
    return cls == RATE_LIMITED or status == 429 or (retry_after and status in REFUSAL_STATUSES)


@dataclass(frozen=True, slots=True)
class Answer:
    sent: float
    done: float
    cls: str
    status: int | None = None
    #: the server sent Retry-After
    retry_after: bool = False

    @property
    def latency(self) -> float:
        return max(0.0, self.done - self.sent)


@dataclass
class StepFigures:
    """What one step measured, and what the policy made of it."""

    concurrency: int
    phase: str  # "ramp" or "bisect"
    #: requests sent in the step (all, the warm-up too)
    requests: int = 0
    #: answers kept (after the warm-up)
    answers: int = 0
    #: good answers per second in the kept window
    goodput: float = 0.0
    #: share of the kept answers that were good
    success: float = 1.0
    #: kept answers by failure class
    classes: dict[str, int] = field(default_factory=dict)
    p50: float = 0.0
    p95: float = 0.0
    #: requests actually in flight on average (time-weighted, kept window)
    in_flight: float = 0.0
    #: share of the window the probe's process was running or waiting for a CPU
    busy: float = 0.0
    #: seconds the kept window lasted
    seconds: float = 0.0
    #: requests sent per second over the whole step
    offered: float = 0.0
    #: the rate ceiling the step ran under (requests/s), None when none
    rate_ceiling: float | None = None
    #: a refusal was seen (at any time in the step): a 429, or a 503 with Retry-After
    rate_limited: bool = False
    #: seconds the server asked to wait (largest Retry-After), 0 when none
    retry_after: float = 0.0
    #: p95 of how late the probe's event loop ran a 10 ms timer in the step (its own delay)
    loop_lag: float = 0.0
    #: "good", "bad" or "client_bound", set by the policy
    verdict: str = ""
    #: bad only by latency or goodput (no error said so): run again once to confirm
    soft: bool = False
    reasons: list[str] = field(default_factory=list)

    @property
    def block_share(self) -> float:
        return self.classes.get(BLOCKED, 0) / self.answers if self.answers else 0.0

    def share(self, cls: str) -> float:
        return self.classes.get(cls, 0) / self.answers if self.answers else 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method; 0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))
    return s[k]


def summarise(
    answers: Sequence[Answer],
    *,
    concurrency: int,
    phase: str,
    start: float,
    end: float,
    warmup: float,
    requests: int,
    in_flight: float = 0.0,
    busy: float = 0.0,
    retry_after: float = 0.0,
    rate_ceiling: float | None = None,
    loop_lag: float = 0.0,
) -> StepFigures:
    """The figures of a step that ran from ``start`` to ``end``; answers to requests sent
    before ``start + warmup`` are dropped (unless that would drop them all)."""
    cut = start + warmup
    kept = [a for a in answers if a.sent >= cut]
    if not kept:  # a step stopped at once (a 429): judge it on what came
        kept, cut = list(answers), start
    window = max(end - cut, 1e-9)
    classes = Counter(a.cls for a in kept)
    good = sum(n for c, n in classes.items() if c in GOOD)
    lat = [a.latency for a in kept]
    return StepFigures(
        concurrency=concurrency,
        phase=phase,
        requests=requests,
        answers=len(kept),
        goodput=good / window,
        success=good / len(kept) if kept else 1.0,
        classes=dict(sorted(classes.items())),
        p50=percentile(lat, 0.5),
        p95=percentile(lat, 0.95),
        in_flight=in_flight,
        busy=busy,
        seconds=window,
        offered=requests / max(end - start, 1e-9),
        rate_ceiling=rate_ceiling,
        loop_lag=loop_lag,
        rate_limited=any(refusal(a.cls, a.status, a.retry_after) for a in answers),
        retry_after=retry_after,
    )
