"""The outcome: what became of one download attempt, or of a whole request.

"Classify once, act everywhere": the classifier turns (request, response or
exception, callback result) into one :class:`Outcome`; it is sent once as the
:data:`scrapy_scale.signals.outcome` signal and every other component (retry
policy, frontier, egress pool, throttle, stats, metrics) reacts to it alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum


class FailureClass(StrEnum):
    OK = "ok"
    NOT_FOUND = "not_found"
    TRANSIENT = "transient"
    RATE_LIMITED = "rate_limited"
    BLOCKED = "blocked"
    EGRESS_FAILED = "egress_failed"
    PARSE_FAILED = "parse_failed"
    FATAL = "fatal"

    @classmethod
    def parse(cls, value: str) -> FailureClass:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"unknown failure class {value!r}; known: {', '.join(c.value for c in cls)}"
            ) from None


#: Classes after which a request is done (it succeeded, or there is nothing to fetch).
DONE_CLASSES = frozenset({FailureClass.OK, FailureClass.NOT_FOUND})


@dataclass(frozen=True, slots=True)
class Outcome:
    """One classified result.

    ``final`` is False for an attempt that will be retried (``retry_at`` then says
    when) and True for the request's last word. Exactly one final outcome is sent
    per request (a request and all its retries share ``fingerprint``).
    """

    fingerprint: str
    url: str
    domain: str
    cls: FailureClass
    reason: str = ""
    status: int | None = None
    exception: str | None = None
    egress: str | None = None
    latency: float | None = None
    attempt: int = 1
    final: bool = True
    retry_at: float | None = None
    #: items the callback yielded for this request (final outcomes after a callback)
    items: int = 0
    avoid_egress: tuple[str, ...] = field(default=())

    @property
    def done(self) -> bool:
        return self.cls in DONE_CLASSES

    def but(self, **changes: object) -> Outcome:
        return replace(self, **changes)  # type: ignore[arg-type]
