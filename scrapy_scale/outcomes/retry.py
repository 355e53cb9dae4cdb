"""Retry plans for requests, and the retry request itself.

:class:`RetryDecider` applies the :class:`~scrapy_scale.outcomes.policy.RetryPolicy`
to a request (its meta keys ``dont_retry``, ``max_retry_times``, Scrapy's
``RETRY_ENABLED``) and to the classifier's verdict (its Retry-After, and whether
the project's RETRY_HTTP_CODES / RETRY_EXCEPTIONS let it be retried). Its
:meth:`~RetryDecider.plan` is the one call the downloader middleware makes per
attempt: one :class:`~scrapy_scale.outcomes.plan.RetryPlan` back (the outcome to
send, the retry request, the give-up line's level, the stats to count).

:func:`retry_request` is public, as Scrapy's ``get_retry_request`` is: the next
attempt of a request's chain, carrying the chain's meta keys.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from scrapy.utils.httpobj import urlparse_cached

from scrapy_scale import meta_keys
from scrapy_scale import stats_keys as K
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.emit import build_outcome, egress_id
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.outcomes.noise import RouteBlocks, SiteNoise
from scrapy_scale.outcomes.plan import DONE, Attempt, RetryPlan, Step
from scrapy_scale.outcomes.policy import BROKEN_PAGE, NO_RETRY, Decision, RetryPolicy

if TYPE_CHECKING:
    from scrapy import Request

#: a chain's first failure stored this far ahead of now is taken as a bad value (seconds)
FUTURE_SLACK = 300.0

#: the classes a chain counts failed attempts of (meta_keys.CLASS_FAILURES)
COUNTED = frozenset(c.value for c in FailureClass)

#: Scrapy's own retry logger, so users' log filters and greps keep working
scrapy_retry_logger = logging.getLogger("scrapy.downloadermiddlewares.retry")


class RetryDecider:
    def __init__(
        self,
        policy: RetryPolicy,
        *,
        enabled: bool = True,
        priority_adjust: int = -1,
        build: Callable[..., Outcome] = build_outcome,
    ):
        self.policy = policy
        self.enabled = enabled
        #: Scrapy's RETRY_PRIORITY_ADJUST (a request's ``priority_adjust`` meta key wins)
        self.priority_adjust = priority_adjust
        #: makes an attempt's outcome (the crawler's emitter: its fingerprints and Retry-After cap)
        self.build = build
        #: per host, whether it answers well apart from a few failures (quick retries then)
        self.noise = SiteNoise()
        #: per host, each egress's latest answer: whether a block is only its route's
        self.routes = RouteBlocks()
        #: whether a pacer spaces the requests to each site (the throttle): a refusal's
        #: quick retry is sooner at a calm site only then (without one, nothing else would
        #: space retries told to slow down)
        self.paced: Callable[[], bool] = lambda: False

    def plan(self, request: Request, attempt: Attempt) -> RetryPlan:
        """What to do with ``attempt`` of ``request``: the one call per attempt."""
        v = attempt.verdict
        if attempt.internal:
            return self._plan_internal(request, attempt)
        if v.cls is FailureClass.OK and attempt.answered:
            self.observe_ok(request, v.cls)
            return DONE
        d = self.decide(request, v, answered=attempt.answered)
        fields = {"status": attempt.status, "exception": attempt.exception, "latency": attempt.latency}
        if d.retry:
            o = self.build(request, v, final=False, retry_at=d.not_before, **fields)
            avoid = self._avoid(request, o)
            new = retry_request(
                request,
                o,
                not_before=d.not_before,
                avoid=avoid,
                priority_adjust=self.priority_adjust,
                late=d.late,
                failed_at=self.policy.clock(),
                charged=FailureClass.EGRESS_FAILED if d.as_egress_failure else None,
            )
            counted = ((K.RETRY_LATE, d.late), (K.RETRY_AS_EGRESS_FAILURE, d.as_egress_failure), (K.RETRY_CALM, d.calm))
            return RetryPlan(
                Step.RETRY_LATER,
                o.but(avoid_egress=avoid),
                retry=new,
                at=d.not_before,
                avoid=avoid,
                stats=tuple(key for key, on in counted if on),
            )
        why = d.why if d.gave_up else None
        if why is None and attempt.answered:
            return DONE  # not retried, nothing to log: the final outcome comes after the callback
        o = self.build(request, v, gave_up=why, **fields)
        if why is None:
            return RetryPlan(Step.DONE, o)
        return RetryPlan(Step.GIVE_UP, o, why=why, level=self._give_up_level(d, o, request))

    def _plan_internal(self, request: Request, attempt: Attempt) -> RetryPlan:
        """Scrapy's own downloads: ``internal`` outcomes (not crawl requests of the frontier),
        a retry at once (the engine re-sends the returned request), no give-up line."""
        v = attempt.verdict
        fields = {"status": attempt.status, "exception": attempt.exception, "internal": True}
        if v.cls is FailureClass.OK:
            return RetryPlan(Step.DONE, self.build(request, v, **fields))
        d = self.decide(request, v, late_ok=False)
        if not d.retry:
            why = d.why if d.gave_up else None
            o = self.build(request, v, gave_up=why, **fields)
            return RetryPlan(Step.GIVE_UP if why else Step.DONE, o, why=why)
        now = self.policy.clock()
        o = self.build(request, v, final=False, retry_at=now, **fields)
        new = request.copy()
        count_attempt(new, request, o, FailureClass.EGRESS_FAILED if d.as_egress_failure else None)
        new.dont_filter = True
        # the egress that failed it is avoided, as a crawl request's retry does: re-sent at
        # once, a robots.txt cut at a blackhole's first-byte bound drew the same egress again
        # and its whole site waited twice that bound (traced in the chaos benchmark)
        avoid = self._avoid(request, o)
        if avoid:
            new.meta[meta_keys.AVOID_EGRESS] = list(avoid)
        return RetryPlan(Step.RETRY_NOW, o.but(avoid_egress=avoid), retry=new, at=now, avoid=avoid)

    def observe_ok(self, request: Request, cls: FailureClass) -> None:
        """An attempt of ``request`` got an answer the classifier took as good (``cls``:
        ok, not_found): counted for its host's noise. Failures are counted by :meth:`decide`."""
        where = urlparse_cached(request).hostname or ""
        self.noise.note(where, cls, _page(request))
        self.routes.note(where, egress_id(request), _page(request), blocked=False)

    def decide(self, request: Request, verdict: Verdict, late_ok: bool = True, answered: bool = True) -> Decision:
        """``late_ok``: False for Scrapy's own downloads (robots.txt), retried at once.
        ``answered``: False for an attempt that got no response (an exception)."""
        m = request.meta
        where = urlparse_cached(request).hostname or ""
        late_done, first_failed = self.late_state(m, where) if late_ok else (0, None)
        # each class's budget counts the chain's attempts of that class only: two dead proxies
        # in a row spent a site's entry page's transient budget (the whole site behind it was
        # lost), and two random 503s, a 403 through the proxy the site denies and a dead
        # proxy spent a listing's blocked budget (its 175-page subtree lost, the real plan)
        attempt = meta_keys.attempt_of(m)
        counts = meta_keys.class_failures_of(m, attempt, COUNTED)
        # no answer through an egress that has not proved itself (meta_keys.EGRESS_PROBE): retried as
        # an egress failure (at once, through another egress, in that budget), though its
        # blame is left to the egress pool's evidence: a site's page that hangs is no reason
        # to evict an egress, and a late retry is no reason to lose a site's entry page.
        # A block only this route gets (RouteBlocks.only: a site that denies one proxy) is
        # the egress's failure too; its blame stays the block's (the egress at that site)
        cls = verdict.cls
        page = _page(request)
        if _unproven_egress(m, cls, answered):
            cls = FailureClass.EGRESS_FAILED
        elif cls is FailureClass.BLOCKED and late_ok and answered:
            if self.routes.only(where, egress_id(request), page):
                cls = FailureClass.EGRESS_FAILED
        if answered and late_ok:
            self.routes.note(where, egress_id(request), page, blocked=verdict.cls is FailureClass.BLOCKED)
        at_egress = (counts or {}).get(FailureClass.EGRESS_FAILED.value, 0)
        if cls is FailureClass.EGRESS_FAILED:
            n = at_egress + 1
        elif counts is None or m.get("max_retry_times") is not None:
            # a chain without the counts (begun so, or stored by an older version), or a
            # request's own cap (Scrapy's ``max_retry_times``: the chain's retries, whatever
            # failed): every attempt that reached the site counts, the old rule
            n = attempt - at_egress
        else:
            n = counts.get(cls.value, 0) + 1
        limited = cls is FailureClass.RATE_LIMITED
        paced_refusal = limited and self.paced()
        if late_ok and not paced_refusal:
            # a crawl request's attempt (robots.txt's are Scrapy's own): its host's noise, the
            # class as decided (an unproven egress's failure is not the host's). A refusal the
            # pacer spaces is the pacer's evidence (it slows the route, or the site when most
            # routes are refused), not a failure of the site: counted, the 429s each route meets
            # while it learns its limit, with 5% of 503s, took a host past the calm share and a
            # page's late retries waited 10 s then 14 s while the rest of its site was done
            # (the chaos benchmark's trace: a 37 s crawl of a 17 s plan)
            self.noise.note(where, cls, page)
        calm = self.noise.calm(where) and (not limited or paced_refusal)
        # the site's own answer about this page while its other pages answer well: a broken
        # page (the policy gives it no late retry); an attempt without an answer may be the
        # route's fault and keeps them
        alone = late_ok and answered and self.noise.alone(where, page)
        d = self.policy.decide(
            cls,
            n,
            retry_after=verdict.retry_after,
            max_retries=m.get("max_retry_times"),
            dont_retry=bool(m.get("dont_retry", False)),
            enabled=self.enabled,
            where=where,
            late_done=late_done,
            first_failed=first_failed,
            late_ok=late_ok,
            calm=calm,
            alone=alone,
            slow_down=verdict.slow_down,
        )
        if d.retry and not verdict.retryable:
            return Decision(False, gave_up=True, why="not listed")
        return replace(d, as_egress_failure=True) if cls is not verdict.cls else d

    def late_state(self, m: dict[str, object], where: str) -> tuple[int, float | None]:
        """The chain's late retries so far and its first failure's time, from the request's
        meta: stored with the request (the frontier), so untrusted. A count that is not an
        integer >= 0 is taken as 0; a time that is not finite or is in the future as none
        (this failure starts the deadline), each with a warning."""
        done, first = m.get(meta_keys.LATE, 0), m.get(meta_keys.FIRST_FAILED)
        if isinstance(done, bool) or not isinstance(done, int) or done < 0:
            self._bad_meta(meta_keys.LATE, done, where)
            done = 0
        if first is not None:
            if not _a_time(first) or first > self.policy.clock() + FUTURE_SLACK:  # type: ignore[operator]
                self._bad_meta(meta_keys.FIRST_FAILED, first, where)
                first = None
        return done, first  # type: ignore[return-value]

    def _bad_meta(self, key: str, value: object, where: str) -> None:
        self.policy.warn(
            K.RETRY_LATE_BAD_META.removeprefix("scale/"),
            "ignoring meta[%r] = %.60r of a request to %s: not a valid value (a stored request edited "
            "or written by another version?)",
            key,
            value,
            where or "?",
        )

    def _give_up_level(self, decision: Decision, outcome: Outcome, request: Request) -> int:
        """The level of the give-up line: the request's ``give_up_log_level`` meta key (as
        Scrapy's RetryMiddleware reads it), else the class policy's; DEBUG when the project
        asked for no retry (``dont_retry``, RETRY_ENABLED = False, not listed)."""
        if decision.why not in ("budget", "deadline", BROKEN_PAGE):
            return logging.DEBUG
        lv = request.meta.get("give_up_log_level")
        if lv is not None:
            level = lv if isinstance(lv, int) else logging.getLevelName(str(lv).upper())
            if isinstance(level, int):
                return level
        return self.policy.policies[outcome.cls].give_up_level

    def _avoid(self, request: Request, outcome: Outcome) -> tuple[str, ...]:
        """The egresses the next attempt must avoid: the failed one is added when the class
        asks for a new egress, after a failure past the connection (a ``transient``
        outcome without a response: a timeout, an answer that is not HTTP, a connection
        closed mid-answer), which may be the egress's fault, and after a 503 saying the site
        is overloaded (``slow_down``): a site that limits each client address refuses so
        (nginx's ``limit_req``), and the route that was refused is the worst one to retry
        through (the real plan lost a page so: refused 4 times within 3.3 s, 3 of them
        through the same proxy, then given up as a broken page)."""
        avoid = tuple(request.meta.get(meta_keys.AVOID_EGRESS) or ())
        after_connect = outcome.cls is FailureClass.TRANSIENT and outcome.status is None
        new_egress = self.policy.policies[outcome.cls].new_egress or after_connect or outcome.slow_down
        if new_egress and outcome.egress and outcome.egress not in avoid:
            avoid = (*avoid, outcome.egress)
        return avoid


def retry_request(
    request: Request,
    outcome: Outcome,
    *,
    not_before: float | None,
    avoid: tuple[str, ...] = (),
    priority_adjust: int = -1,
    late: bool = False,
    failed_at: float | None = None,
    charged: FailureClass | None = None,
) -> Request:
    """The next attempt of ``request``'s chain after the failed attempt ``outcome``.

    A copy with ``dont_filter=True``, ``priority += meta["priority_adjust"]`` (else
    ``priority_adjust``, Scrapy's RETRY_PRIORITY_ADJUST) and the chain's meta keys:
    ``scale_attempt``, ``scale_not_before``, ``scale_avoid_egress``,
    ``scale_last_failure``, ``scale_refused_via`` (the egress of a refusal for the rate),
    ``scale_fingerprint``, ``scale_late`` (late retries made, one more when ``late``),
    ``scale_class_failures`` (see :func:`count_attempt`; ``charged``: the class whose budget
    the attempt was decided in),
    ``scale_first_failed`` (kept, else ``failed_at``, else now) and Scrapy's ``retry_times``.
    """
    if failed_at is None:
        failed_at = time.time()
    new = request.copy()
    m = new.meta
    count_attempt(new, request, outcome, charged)
    m[meta_keys.NOT_BEFORE] = not_before
    m[meta_keys.AVOID_EGRESS] = list(avoid)
    m[meta_keys.LAST_FAILURE] = [outcome.cls.value, outcome.reason]
    if outcome.egress and (outcome.cls is FailureClass.RATE_LIMITED or outcome.slow_down):
        m[meta_keys.REFUSED_VIA] = str(outcome.egress)  # refused for the rate through that route
    else:
        m.pop(meta_keys.REFUSED_VIA, None)
    m[meta_keys.FINGERPRINT] = outcome.fingerprint
    done, first = m.get(meta_keys.LATE), m.get(meta_keys.FIRST_FAILED)
    done = done if isinstance(done, int) and not isinstance(done, bool) and done >= 0 else 0
    m[meta_keys.LATE] = done + 1 if late else done
    if not _a_time(first) or first > failed_at + FUTURE_SLACK:  # type: ignore[operator]
        m[meta_keys.FIRST_FAILED] = failed_at
    m["retry_times"] = outcome.attempt  # what Scrapy's own retry code would show
    new.dont_filter = True
    new.priority = request.priority + int(request.meta.get("priority_adjust", priority_adjust))
    return new


def count_attempt(new: Request, request: Request, outcome: Outcome, charged: FailureClass | None = None) -> None:
    """The chain's attempt counters on ``new``, the next attempt of ``request`` after its
    failed attempt ``outcome``: ``scale_attempt``, and in ``scale_class_failures`` one more
    for the class whose budget the attempt was decided in: ``charged`` when given, else
    ``egress_failed`` for no answer through an unproven egress, else the outcome's class
    (every retry counts, Scrapy's own downloads' too: a failure not counted would be
    retried for ever)."""
    new.meta[meta_keys.ATTEMPT] = outcome.attempt + 1
    if charged is None:
        unproven = _unproven_egress(request.meta, outcome.cls, outcome.status is not None)
        charged = FailureClass.EGRESS_FAILED if unproven else outcome.cls
    counts = meta_keys.class_failures_of(request.meta, outcome.attempt, COUNTED)
    if counts is None:  # the old rule's reading: every earlier attempt in this class's budget
        counts = {} if charged is FailureClass.EGRESS_FAILED else {charged.value: outcome.attempt - 1}
    counts[charged.value] = counts.get(charged.value, 0) + 1
    new.meta[meta_keys.CLASS_FAILURES] = counts


def _unproven_egress(m: dict[str, object], cls: FailureClass, answered: bool) -> bool:
    """A ``transient`` attempt without an answer through an egress that had not proved itself
    (a re-probe, or no answer through it yet while others answered): retried as the egress's
    failure. Only ``True`` counts (one attempt's key, set by the egress middleware)."""
    return cls is FailureClass.TRANSIENT and not answered and m.get(meta_keys.EGRESS_PROBE) is True


def _page(request: Request) -> str:
    """The key of a request's page for its site's noise: its chain's fingerprint."""
    fp = request.meta.get(meta_keys.FINGERPRINT)
    return fp if isinstance(fp, str) else request.url


def _a_time(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


__all__ = [
    "NO_RETRY",
    "Attempt",
    "Decision",
    "RetryDecider",
    "RetryPlan",
    "Step",
    "count_attempt",
    "retry_request",
    "scrapy_retry_logger",
]
