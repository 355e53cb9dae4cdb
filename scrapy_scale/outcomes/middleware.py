"""Scrapy glue of the classifier and the retry policy (thin; the decisions are elsewhere).

- :class:`OutcomeDownloaderMiddleware` (replaces Scrapy's RetryMiddleware, order 550):
  classifies every response and download exception, asks the retry policy for one
  plan per attempt (:meth:`RetryDecider.plan <scrapy_scale.outcomes.retry.RetryDecider.plan>`)
  and carries it out: a non-final outcome and the retry request when it retries, the
  final outcome of download exceptions, the give-up line; and keeps a request from being
  sent before its not-before time.
- :class:`OutcomeSpiderMiddleware` (order 45, just outside HttpErrorMiddleware):
  sends the final outcome of every response once the callback's output was fully
  consumed, with the item count, after the parse checks.

Every decision is the classifier's (:mod:`scrapy_scale.outcomes.classify`) and the
policy's (:mod:`scrapy_scale.outcomes.retry`); every reaction is a subscriber's.
docs/outcomes.md lists which hook produces which outcome.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request
from scrapy.http.request import NO_CALLBACK

from scrapy_scale import meta_keys, startup
from scrapy_scale import stats_keys as K
from scrapy_scale.errors import ScaleError
from scrapy_scale.meta_keys import NOT_BEFORE_TOLERANCE
from scrapy_scale.outcomes.core import OutcomeCore
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.outcomes.parse_tracker import Pending
from scrapy_scale.outcomes.plan import Attempt, RetryPlan, Step
from scrapy_scale.outcomes.policy import BROKEN_PAGE
from scrapy_scale.outcomes.retry import scrapy_retry_logger
from scrapy_scale.outcomes.stats import scrapy_reason

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger("scrapy_scale.outcomes")


#: the give-up line's words for a ``Decision.why`` that needs more than its name
_WHY = {BROKEN_PAGE: "broken page: its site answers well: a broken page, not an outage; no more late retries"}


class GaveUpError(IgnoreRequest, ScaleError):
    """Raised instead of an expected download exception that will not be retried, for a
    request without errback: the one log line was written already, and Scrapy does not
    log IgnoreRequest again with a traceback. ``original`` is the download exception."""

    def __init__(self, original: BaseException, outcome: Outcome):
        super().__init__(f"{outcome.cls.value}: {outcome.reason}")
        self.original = original
        self.outcome = outcome


class OutcomeDownloaderMiddleware:
    def __init__(self, core: OutcomeCore):
        self.core = core
        self.clock = core.clock
        self.started: weakref.WeakKeyDictionary[Request, float] = weakref.WeakKeyDictionary()
        core.context.outcomes_on = True

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> OutcomeDownloaderMiddleware:
        return cls(OutcomeCore.of(crawler))

    def process_request(self, request: Request, spider: Any = None) -> Request | None:
        m = request.meta
        core = self.core
        fp = m.get(meta_keys.FINGERPRINT)
        if fp is None:
            m[meta_keys.FINGERPRINT] = core.emitter.fingerprint(request)
        elif not m.get("redirect_urls") and not core.context.scheduler_holds_retries:
            # (the frontier sets the real fingerprint at enqueue; elsewhere it is cached)
            real = core.crawler.request_fingerprinter.fingerprint(request).hex()  # type: ignore[union-attr]
            if real != fp:
                # chain keys copied along with response.meta into a new request: a new chain
                m[meta_keys.FINGERPRINT] = real
                for key in meta_keys.CHAIN_KEYS:
                    m.pop(key, None)
        nb = meta_keys.not_before_of(m)
        # HOLD_BACK: the egress pool let it pass without an egress as not due yet
        held_back = m.pop(meta_keys.HOLD_BACK, False)
        if nb is not None and (held_back or nb > self.clock() + NOT_BEFORE_TOLERANCE):
            # never sent early: back to the engine, held until its time (not blocking a slot)
            core.stats.inc_value(K.RETRY_NOT_BEFORE_GUARD)
            again = request.replace(dont_filter=True)
            core.delayed.hold(again)
            return again
        self.started[request] = self.clock()
        return None

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Request | Response:
        self.started.pop(request, None)
        verdict = self.core.classifier.classify_response(response, request)
        internal = request.callback is NO_CALLBACK
        latency = None if internal else request.meta.get("download_latency")
        attempt = Attempt(verdict, response.status, None, latency, internal)
        return self._carry_out(request, attempt, self.core.decider.plan(request, attempt)) or response

    def process_exception(self, request: Request, exception: Exception, spider: Any = None) -> Request | None:
        if isinstance(exception, GaveUpError):
            return None
        verdict = self.core.classifier.classify_exception(exception, request)
        t0 = self.started.pop(request, None)
        internal = request.callback is NO_CALLBACK
        latency = self.clock() - t0 if t0 is not None and not internal else None
        attempt = Attempt(verdict, None, exception, latency, internal)
        return self._carry_out(request, attempt, self.core.decider.plan(request, attempt))

    def _carry_out(self, request: Request, attempt: Attempt, plan: RetryPlan) -> Request | None:
        """Do what ``plan`` says: count its stats, write its lines, send its outcome; the
        retry request to return, else None (after an exception, or GaveUpError raised)."""
        core = self.core
        for key in plan.stats:
            core.stats.inc_value(key)
        o = plan.outcome
        if plan.retry is not None and o is not None:
            if plan.step is Step.RETRY_LATER:
                core.delayed.retry_made()
                scrapy_retry_logger.debug(
                    "Retrying %(request)s (failed %(retry_times)d times): %(reason)s",
                    {"request": request, "retry_times": o.attempt, "reason": scrapy_reason(o)},
                    extra={"spider": core.crawler.spider},
                )
            core.emitter.send(o, request)
            return plan.retry
        if o is None or not (o.internal or attempt.exception is not None):
            # a crawl response: its final outcome is made once its callback ran
            if o is not None and plan.level is not None:
                self._log_give_up(o, plan.level, plan.why, request)
            self._final_after_callback(request, Pending(attempt.verdict, attempt.status, attempt.latency, plan.why))
            return None
        core.emitter.send(o, request)
        if attempt.exception is None or o.internal or not self._logs_give_up(attempt):
            return None
        if plan.level is not None:
            self._log_give_up(o, plan.level, plan.why, request)
        else:
            logger.warning(
                "Failed %s: %s (%s)", o.url, o.cls.value, o.reason or "-", extra={"spider": core.crawler.spider}
            )
        if request.errback is None:
            raise GaveUpError(attempt.exception, o)
        return None

    @staticmethod
    def _logs_give_up(attempt: Attempt) -> bool:
        """IgnoreRequest is not logged by Scrapy; a surprise (no rule matched) keeps its traceback."""
        return not isinstance(attempt.exception, IgnoreRequest) and attempt.verdict.expected

    def _final_after_callback(self, request: Request, pending: Pending) -> None:
        core = self.core
        if core.context.parse_outcomes_on:
            # the spider middleware sends it once the callback output is consumed, with the item count
            core.parsing.await_callback(request, pending)
        else:
            o = core.emitter.build(
                request, pending.verdict, status=pending.status, latency=pending.latency, gave_up=pending.gave_up
            )
            core.emitter.send(o, request)

    def _log_give_up(self, o: Outcome, level: int, why: str | None, request: Request) -> None:
        # Scrapy's RetryMiddleware wording ("Gave up retrying <GET url> (failed N times): reason"),
        # which users grep for; the reason is our class and its reason
        logger.log(
            level,
            "Gave up retrying <%s %s> (failed %d times): %s (%s)%s",
            request.method,
            o.url,
            o.attempt,
            o.cls.value,
            o.reason or "-",
            "" if why == "budget" else f" [{_WHY.get(why or '', why)}]",
            extra={"spider": self.core.crawler.spider},
        )


class OutcomeSpiderMiddleware:
    def __init__(self, core: OutcomeCore):
        self.core = core
        self.parsing = core.parsing
        core.context.parse_outcomes_on = True
        core.context.outcomes_on = True

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> OutcomeSpiderMiddleware:
        return cls(OutcomeCore.of(crawler))

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        parsing = self.parsing
        st = parsing.state(response)
        req = response.request
        fp = req.meta.get(meta_keys.FINGERPRINT) if req is not None else None
        try:
            async for x in result:
                if isinstance(x, Request):
                    if fp is not None and x.url == req.url and x.meta.get(meta_keys.FINGERPRINT) == fp:  # type: ignore[union-attr]
                        parsing.callback_retry(response, st, x)  # e.g. get_retry_request() in the callback
                    else:
                        st.requests += 1
                elif x is not None:
                    parsing.item(st, x)
                yield x
        except Exception as e:
            parsing.finish(response, st, e)
            raise
        parsing.finish(response, st)

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Any = None
    ) -> Iterable[Any] | None:
        self.parsing.finish(response, self.parsing.state(response), exception)
        return None
