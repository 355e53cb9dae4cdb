"""The retry policy: per failure class, an attempt budget and a backoff.

Plain Python with an injectable clock and randomness (no reactor), so it is
unit-tested with :class:`scrapy_scale.clock.FakeClock` and ``Randomness(seed)``.

Backoff is exponential with FULL jitter: the n-th retry waits
``uniform(0, min(cap, base * 2 ** (n - 1)))`` seconds, so requests that failed
together do not come back together. A ``Retry-After`` from the server is a
floor: the retry waits ``Retry-After + full-jitter backoff`` (so 200 requests
told "come back in 3 s" do not all come back at exactly 3 s).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from scrapy_scale.clock import Clock, Randomness, wall
from scrapy_scale.outcomes._log import FirstFew
from scrapy_scale.outcomes.late import NO_LATE, LatePolicy
from scrapy_scale.outcomes.model import FailureClass

logger = logging.getLogger(__name__)

C = FailureClass


@dataclass(frozen=True, slots=True)
class ClassPolicy:
    """What to do with one failure class.

    ``retries``: retries allowed after the first attempt (attempt budget = 1 + retries).
    ``base``/``cap``: full-jitter backoff window in seconds, ``min(cap, base * 2**(n-1))``.
    ``new_egress``: the retry must avoid the egress the failed attempt went through.
    ``give_up_level``: log level of the one line logged when the budget is spent.
    ``calm``: the backoff window's bound (seconds) while the failure's site answers well
    otherwise (:mod:`scrapy_scale.outcomes.noise`): a stray 503 or a refusal through one
    route among good answers is noise, and the page, which may be the listing the site's
    next pages wait for, is tried again soon; 0 = the class's window always.
    """

    retries: int = 0
    base: float = 1.0
    cap: float = 30.0
    new_egress: bool = False
    give_up_level: int = logging.WARNING
    calm: float = 0.0


DEFAULT_POLICIES: dict[FailureClass, ClassPolicy] = {
    C.OK: ClassPolicy(),
    C.NOT_FOUND: ClassPolicy(),
    C.TRANSIENT: ClassPolicy(retries=2, base=1.0, cap=30.0, calm=0.5),
    C.RATE_LIMITED: ClassPolicy(retries=5, base=2.0, cap=120.0, calm=0.5),
    C.BLOCKED: ClassPolicy(retries=2, base=0.5, cap=10.0, new_egress=True),
    C.EGRESS_FAILED: ClassPolicy(retries=3, base=0.0, cap=0.0, new_egress=True),
    C.PARSE_FAILED: ClassPolicy(),
    C.FATAL: ClassPolicy(),
}

#: classes that are never retried whatever the settings say
NEVER_RETRIED = frozenset({C.OK, C.NOT_FOUND, C.PARSE_FAILED})
#: classes whose failure can be a broken page (the site's own answer about that page): a
#: refusal (``rate_limited``) is the pacer's business, a ``blocked`` or ``egress_failed``
#: attempt blames the route, not the page; they keep their late retries
BROKEN_PAGE_CLASSES = frozenset({C.TRANSIENT})
#: why a retryable failure was given up as a broken page (``Decision.why``)
BROKEN_PAGE = "broken_page"
#: late retries a page that fails alone still gets: one, so that a page whose three tries
#: all met noise (a site's random 503s, a 429 on the way) is not lost with the listing's
#: subtree behind it; a broken page then costs 4 requests, not 3
BROKEN_PAGE_LATE = 1
#: late retries more for a page whose answers said the site is overloaded (a 503 without
#: Retry-After: ``slow_down``), and their windows are the late policy's, not the calm bound:
#: nginx's limit_req refuses so, and the real plan's host b refused a page through each of
#: its 4 routes within 1.5-2.7 s while every route was at its limit, and it was given up as
#: a broken page (1 page of 625 in 4 rounds out of 12). A broken page that answers 503 costs
#: 5 requests, not 4, and about 5 s more
BROKEN_PAGE_SLOW_DOWN_LATE = 1

_KEYS = {f.name for f in fields(ClassPolicy)}


def _level(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        lv = logging.getLevelName(v.upper())
        if isinstance(lv, int):
            return lv
    raise ValueError(f"unknown log level {v!r}")


def parse_policy_overrides(value: Any) -> dict[FailureClass, dict[str, Any]]:
    """Validate ``SCALE_RETRY_POLICY``: ``{class: {retries, base, cap, calm, new_egress, give_up_level}}``."""
    from scrapy_scale.config import as_dict
    from scrapy_scale.outcomes.classify import reject_unknown_keys

    raw = as_dict(value)
    out: dict[FailureClass, dict[str, Any]] = {}
    for name, spec in raw.items():
        cls = FailureClass.parse(str(name))
        if not isinstance(spec, Mapping):
            raise ValueError(f"{cls.value}: expected a dict of {', '.join(sorted(_KEYS))}")
        reject_unknown_keys(cls.value, spec, _KEYS)
        clean: dict[str, Any] = {}
        for key, v in spec.items():
            if key == "retries":
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{cls.value}.retries: expected an integer >= 0")
                if v and cls in NEVER_RETRIED:
                    raise ValueError(f"{cls.value}: this class is never retried")
                clean[key] = v
            elif key in ("base", "cap", "calm"):
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    raise ValueError(f"{cls.value}.{key}: expected a number of seconds >= 0")
                clean[key] = float(v)
            elif key == "new_egress":
                if not isinstance(v, bool):
                    raise ValueError(f"{cls.value}.new_egress: expected True or False")
                clean[key] = v
            else:
                clean[key] = _level(v)
        out[cls] = clean
    return out


def build_policies(
    overrides: Mapping[FailureClass, Mapping[str, Any]] | None = None,
    retry_times: int | None = None,
    give_up_level: int | None = None,
) -> dict[FailureClass, ClassPolicy]:
    """Defaults, then Scrapy's RETRY_TIMES / RETRY_GIVE_UP_LOG_LEVEL (when the project set
    them) for every retried class, then the per-class ``SCALE_RETRY_POLICY`` overrides."""
    out = dict(DEFAULT_POLICIES)
    for cls, p in out.items():
        if cls in NEVER_RETRIED or cls is C.FATAL:
            continue
        if retry_times is not None:
            p = replace(p, retries=retry_times)
        if give_up_level is not None:
            p = replace(p, give_up_level=give_up_level)
        out[cls] = p
    for cls, changes in (overrides or {}).items():
        if ("base" in changes or "cap" in changes) and "calm" not in changes:
            changes = {**changes, "calm": 0.0}  # the project's own window, whatever the site's noise
        out[cls] = replace(out[cls], **changes)
    return out


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's verdict on one failed attempt."""

    retry: bool
    #: seconds to wait before the next attempt (retry only)
    delay: float = 0.0
    #: epoch seconds before which the retry must not be sent (retry only)
    not_before: float | None = None
    #: the class is retryable but its budget is spent (or retries were switched off)
    gave_up: bool = False
    #: why it was not retried: "budget", "deadline" (``SCALE_RETRY_LATE``), "broken_page"
    #: (:data:`BROKEN_PAGE`: no more late retries for a page that fails alone), "dont_retry",
    #: "disabled", "not listed" (the project's RETRY_HTTP_CODES / RETRY_EXCEPTIONS), ""
    #: (a class that is never retried)
    why: str = ""
    #: a late retry (``SCALE_RETRY_LATE``): the quick budget was spent
    late: bool = False
    #: decided as an ``egress_failed`` attempt though its class is another: no answer
    #: through an egress that had not proved itself (``transient``), or a block only its
    #: route gets (``blocked``; see ``RetryDecider.decide``)
    as_egress_failure: bool = False
    #: a quick retry whose backoff window was bounded by the class's ``calm`` (its site
    #: answers well otherwise)
    calm: bool = False


NO_RETRY = Decision(False)


class RetryPolicy:
    def __init__(
        self,
        policies: Mapping[FailureClass, ClassPolicy] | None = None,
        *,
        retry_after_max: float = 600.0,
        clock: Clock = wall,
        rng: Randomness | None = None,
        warn: Callable[..., None] | None = None,
        late: LatePolicy = NO_LATE,
    ):
        self.policies = dict(policies or DEFAULT_POLICIES)
        self.late = late
        self.retry_after_max = retry_after_max
        self.clock = clock
        self.rng = rng or Randomness()
        self.warn = warn or FirstFew(logger)

    def window(self, cls: FailureClass, attempt: int) -> float:
        """Upper bound of the backoff after failed attempt number ``attempt`` (1-based)."""
        p = self.policies[cls]
        if p.base <= 0 or p.cap <= 0:
            return 0.0
        exp = min(attempt - 1, 60)  # 2**60 seconds is past any cap
        return min(p.cap, p.base * (2.0**exp))

    def backoff(self, cls: FailureClass, attempt: int, calm: bool = False) -> float:
        w = self.window(cls, attempt)
        if calm and self.policies[cls].calm > 0:
            w = min(w, self.policies[cls].calm)
        return self.rng.uniform(0.0, w) if w > 0 else 0.0

    def clamp_retry_after(self, seconds: float | None, where: str = "") -> float | None:
        """Negative -> 0, past ``retry_after_max`` -> the max, not finite -> ignored (None),
        each with a warning."""
        if seconds is None:
            return None
        if not math.isfinite(seconds):
            self.warn(
                "retry_after_bad",
                "Retry-After %s from %s is not a finite number of seconds; ignored",
                seconds,
                where or "?",
            )
            return None
        if seconds < 0:
            self.warn(
                "retry_after_negative",
                "Retry-After in the past (%.1f s) from %s; retrying without waiting for it",
                seconds,
                where or "?",
            )
            return 0.0
        if seconds > self.retry_after_max:
            self.warn(
                "retry_after_huge",
                "Retry-After %.0f s from %s exceeds SCALE_RETRY_AFTER_MAX; waiting %.0f s",
                seconds,
                where or "?",
                self.retry_after_max,
            )
            return self.retry_after_max
        return seconds

    def decide(
        self,
        cls: FailureClass,
        attempt: int,
        *,
        retry_after: float | None = None,
        max_retries: int | None = None,
        dont_retry: bool = False,
        enabled: bool = True,
        where: str = "",
        late_done: int = 0,
        first_failed: float | None = None,
        late_ok: bool = True,
        calm: bool = False,
        alone: bool = False,
        slow_down: bool = False,
    ) -> Decision:
        """Retry the attempt number ``attempt`` (1-based) that failed with ``cls``?

        ``max_retries`` (the ``max_retry_times`` meta key) replaces the class's budget;
        ``retry_after`` is the server's raw Retry-After in seconds (clamped here). Once the
        budget is spent, a late retry (:attr:`late`) when ``late_ok``, fewer than its
        ``retries`` were made (``late_done``) and its deadline after ``first_failed`` (the
        chain's first failure; None: this one) is not past. ``calm``: the site answers well
        otherwise, so a quick retry's window is at most the class's ``calm`` bound, and the
        late retries' windows double from that bound instead of the late ``base`` (a
        Retry-After stays a floor; the count and the deadline are unchanged).
        ``alone``: the site answered this attempt and answers its other pages well (see
        :meth:`scrapy_scale.outcomes.noise.SiteNoise.alone`): once the quick budget is spent,
        a failure of :data:`BROKEN_PAGE_CLASSES` is a broken page, not an outage, and gets
        no more than :data:`BROKEN_PAGE_LATE` late retries (then ``why`` = :data:`BROKEN_PAGE`).
        ``slow_down``: the answer said the site is overloaded (a 503 without Retry-After):
        :data:`BROKEN_PAGE_SLOW_DOWN_LATE` late retries more for a broken page, and late
        windows not bounded by ``calm``.
        """
        p = self.policies[cls]
        if cls in NEVER_RETRIED or (cls is C.FATAL and p.retries <= 0):
            return NO_RETRY
        if dont_retry:
            return Decision(False, gave_up=True, why="dont_retry")
        if not enabled:
            return Decision(False, gave_up=True, why="disabled")
        budget = p.retries if max_retries is None else max_retries
        if attempt > budget:
            # a budget of 0 (RETRY_TIMES = 0, or retries 0 for the class) gives up too, as
            # Scrapy's get_retry_request does: logged at the give-up level and counted;
            # a request that sets its own budget (max_retry_times) gets no late retries
            if late_ok and max_retries is None and self.late.applies(cls, late_done):
                broken_late = BROKEN_PAGE_LATE + (BROKEN_PAGE_SLOW_DOWN_LATE if slow_down else 0)
                if alone and cls in BROKEN_PAGE_CLASSES and late_done >= broken_late:
                    return Decision(False, gave_up=True, why=BROKEN_PAGE)
                calm_late = p.calm if calm and not slow_down else 0.0
                return self._late(cls, late_done, retry_after, first_failed, where, calm_late)
            return Decision(False, gave_up=True, why="budget")
        bounded = calm and 0 < p.calm < self.window(cls, attempt)
        delay = self.backoff(cls, attempt, bounded)
        ra = self.clamp_retry_after(retry_after, where)
        if ra is not None:
            delay += ra
        return Decision(True, delay=delay, not_before=self.clock() + delay, calm=bounded)

    def _late(
        self,
        cls: FailureClass,
        done: int,
        retry_after: float | None,
        first_failed: float | None,
        where: str,
        calm: float = 0.0,
    ) -> Decision:
        now = self.clock()
        delay = self.late.delay(done + 1, self.rng.uniform(0.0, 1.0), calm)
        ra = self.clamp_retry_after(retry_after, where)
        if ra is not None:
            delay = max(delay, ra)
        start = now if first_failed is None else first_failed
        if self.late.deadline and now + delay > start + self.late.deadline:
            return Decision(False, gave_up=True, why="deadline")
        return Decision(
            True, delay=delay, not_before=now + delay, late=True, calm=0 < calm < self.late.window(done + 1)
        )
