"""The outcome: what became of one download attempt, or of a whole request.

"Classify once, act everywhere": the classifier turns (request, response or
exception, callback result) into one :class:`Outcome`; it is sent once as the
:data:`scrapy_scale.signals.outcome` signal and every other component (frontier,
stats, run summary, outcome log, and later the egress pool, throttle and metrics)
reacts to it alone. docs/architecture.md draws the bus.

:data:`CLASSES` is the one class table: default action, blame and a line for humans.
The run summary, the docs (tests check docs/outcomes.md against it) and the metrics
read it; nothing else keeps a copy.
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
            raise ValueError(f"unknown failure class {value!r}; known: {', '.join(c.value for c in cls)}") from None


class Blame(StrEnum):
    """Who an outcome says is at fault, for the layers that keep health or pacing.

    ``domain``: the target site (slow the domain down; never the egress's fault);
    ``egress``: the egress the attempt went through, globally; ``egress_domain``: that
    egress for that domain only (a block); ``egress_site``: that egress for that domain,
    and globally once it failed so on several domains (a proxy's own error answer);
    ``none``: nobody (success, or the page/spider).
    """

    NONE = "none"
    DOMAIN = "domain"
    EGRESS = "egress"
    EGRESS_DOMAIN = "egress_domain"
    EGRESS_SITE = "egress_site"


@dataclass(frozen=True, slots=True)
class ClassInfo:
    cls: FailureClass
    #: typical signals, for the docs
    signals: str
    #: the default action, for the docs
    action: str
    blame: Blame
    #: one line for a reader who sees the class name for the first time (run summary)
    meaning: str
    #: the request is done after this class (it succeeded, or there is nothing to fetch)
    done: bool = False


C = FailureClass
B = Blame

CLASSES: dict[FailureClass, ClassInfo] = {
    i.cls: i
    for i in (
        ClassInfo(C.OK, "2xx/3xx with usable content", "done", B.NONE, "the page was fetched and parsed", done=True),
        ClassInfo(
            C.NOT_FOUND,
            "404, 410",
            "done, counted, never retried",
            B.NONE,
            "404/410: the page is gone; nothing to retry",
            done=True,
        ),
        ClassInfo(
            C.TRANSIENT,
            "connection reset/refused, timeouts, 500/502/504",
            "retried soon, jittered exponential backoff, small budget",
            B.NONE,
            "a passing error (5xx, reset, timeout): retried with backoff",
        ),
        ClassInfo(
            C.RATE_LIMITED,
            "429, 503 with `Retry-After`",
            "retried no sooner than `Retry-After` (plus jitter); the domain slows down",
            B.DOMAIN,
            "the site said slow down (429, 503): retried after Retry-After",
        ),
        ClassInfo(
            C.BLOCKED,
            "401/403, a detected block page",
            "retried through another egress",
            B.EGRESS_DOMAIN,
            "403 or a block page: retried through another egress",
        ),
        ClassInfo(
            C.EGRESS_FAILED,
            "proxy refused or timed out, 407",
            "retried at once through another egress",
            B.EGRESS,
            "the proxy failed: retried at once through another egress",
        ),
        ClassInfo(
            C.PARSE_FAILED,
            "callback raised, no items where items were expected, `SCALE_CRITICAL_FIELDS` missing",
            "never retried; counted; first few logged with the URL",
            B.NONE,
            "the callback failed or found no data: not retried",
        ),
        ClassInfo(
            C.FATAL,
            "anything else (400, bad URL, robots.txt disallowed)",
            "never retried; recorded",
            B.NONE,
            "cannot succeed (400, bad URL): not retried",
        ),
    )
}

#: Classes after which a request is done (it succeeded, or there is nothing to fetch).
DONE_CLASSES = frozenset(c for c, i in CLASSES.items() if i.done)


def blame_of(cls: FailureClass) -> Blame:
    return CLASSES[cls].blame


@dataclass(frozen=True, slots=True)
class Outcome:
    """One classified result, with everything a subscriber needs to react to it.

    ``final`` is False for an attempt that will be retried (``retry_at`` then says
    when) and True for the request's last word. Exactly one final outcome is sent
    per request (a request and all its retries share ``fingerprint``). The retry
    decision is made before the outcome is sent, and travels in it (``final``,
    ``retry_at``, ``gave_up``).
    """

    fingerprint: str
    url: str
    domain: str
    cls: FailureClass
    reason: str = ""
    status: int | None = None
    #: dotted name of the download exception's type
    exception: str | None = None
    #: stable, credential-free id of the egress the attempt went through (None: direct)
    egress: str | None = None
    latency: float | None = None
    attempt: int = 1
    final: bool = True
    retry_at: float | None = None
    #: items the callback yielded for this request (final outcomes after a callback)
    items: int = 0
    #: requests the callback yielded (a retry of its own request aside): a listing page
    #: yields requests and no items
    requests: int = 0
    avoid_egress: tuple[str, ...] = field(default=())
    #: the downloader slot key the request used (the meta key Scrapy's downloader sets)
    slot: str | None = None
    #: the server's Retry-After header as sent (None when absent); for logs and humans only:
    #: subscribers act on :attr:`retry_after`
    retry_after_raw: str | None = None
    #: seconds the server asked to wait (``Retry-After``), parsed and clamped where the
    #: outcome is made: never negative, never above ``SCALE_RETRY_AFTER_MAX``, None when
    #: absent or unusable (not a number, not finite)
    retry_after: float | None = None
    #: the answer says the site is overloaded without saying for how long (a 503 without
    #: ``Retry-After``, classed ``transient``): pacing counts it as possible pressure
    slow_down: bool = False
    #: the class's blame (:data:`CLASSES`), filled in by :meth:`__post_init__`
    blame: Blame = Blame.NONE
    #: a final outcome of a retryable class whose retries were spent or refused
    gave_up: bool = False
    #: why it was not retried when ``gave_up``: "budget", "deadline" (late retries), "broken_page"
    #: (its site answers well: no more late retries), "dont_retry",
    #: "disabled", "not listed"
    gave_up_why: str = ""
    #: Scrapy's own downloads (robots.txt, media): not a crawl request of the frontier
    internal: bool = False
    #: the outcome of a request that ended without the outcome middlewares seeing it end
    fallback: bool = False
    #: a non-final outcome of an attempt the callback itself retried (``get_retry_request``,
    #: which counts Scrapy's retry stats on its own)
    callback_retry: bool = False
    #: name of the spider callback that handles the request's response (``parse`` when the
    #: request names none; None for Scrapy's own downloads)
    callback: str | None = None

    def __post_init__(self) -> None:
        if self.blame is Blame.NONE and CLASSES[self.cls].blame is not Blame.NONE:
            object.__setattr__(self, "blame", CLASSES[self.cls].blame)

    @property
    def done(self) -> bool:
        return self.cls in DONE_CLASSES

    @property
    def responded(self) -> bool:
        """A response came back (any status), as opposed to a download exception."""
        return self.status is not None

    def but(self, **changes: object) -> Outcome:
        if "cls" in changes and "blame" not in changes:
            changes["blame"] = Blame.NONE  # recomputed for the new class
        return replace(self, **changes)  # type: ignore[arg-type]
