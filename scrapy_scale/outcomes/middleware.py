"""Scrapy glue of the classifier and the retry policy (thin; the policy is elsewhere).

- :class:`OutcomeDownloaderMiddleware` (replaces Scrapy's RetryMiddleware, order 550):
  classifies every response and download exception, sends a non-final outcome and
  returns the retry request when the policy retries, sends the final outcome of
  download exceptions, and keeps a request from being sent before its not-before time.
- :class:`OutcomeSpiderMiddleware` (order 45, just outside HttpErrorMiddleware):
  sends the final outcome of every response once the callback's output was fully
  consumed, with the item count, after the parse checks.

docs/outcomes.md lists which hook produces which outcome.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request
from scrapy.http.request import NO_CALLBACK

from scrapy_scale import meta, startup
from scrapy_scale.outcomes.hub import NOT_BEFORE_TOLERANCE, OutcomeHub
from scrapy_scale.outcomes.model import FailureClass
from scrapy_scale.outcomes.retry_after import parse_retry_after

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger("scrapy_scale.outcomes")

C = FailureClass
_RETRY_AFTER_CLASSES = frozenset({C.RATE_LIMITED, C.TRANSIENT})
_GATED = frozenset({C.RATE_LIMITED, C.TRANSIENT})


class GaveUpError(IgnoreRequest):
    """Raised instead of an expected download exception that will not be retried, for a
    request without errback: the one log line was written already, and Scrapy does not
    log IgnoreRequest again with a traceback. ``original`` is the download exception."""

    def __init__(self, original: BaseException, outcome: Any):
        super().__init__(f"{outcome.cls.value}: {outcome.reason}")
        self.original = original
        self.outcome = outcome


class OutcomeDownloaderMiddleware:
    def __init__(self, hub: OutcomeHub):
        self.hub = hub
        self.clock = hub.clock

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> OutcomeDownloaderMiddleware:
        return cls(OutcomeHub.of(crawler))

    def process_request(self, request: Request, spider: Any = None) -> Request | None:
        m = request.meta
        fp = m.get(meta.FINGERPRINT)
        if fp is None:
            m[meta.FINGERPRINT] = self.hub.fingerprint(request)
        elif not m.get("redirect_urls") and not self.hub.scheduler_fingerprints:
            # (the frontier sets the real fingerprint at enqueue; elsewhere it is cached)
            real = self.hub.crawler.request_fingerprinter.fingerprint(request).hex()  # type: ignore[union-attr]
            if real != fp:
                # chain keys copied along with response.meta into a new request: a new chain
                m[meta.FINGERPRINT] = real
                for key in meta.CHAIN_KEYS:
                    m.pop(key, None)
        nb = m.get(meta.NOT_BEFORE)
        if nb and nb > self.clock() + NOT_BEFORE_TOLERANCE:
            # never sent early: back to the engine, held until its time (not blocking a slot)
            self.hub.stats.inc_value("scale/retry/not_before_guard")
            again = request.replace(dont_filter=True)
            self.hub.hold(again)
            return again
        self.hub.started[request] = self.clock()
        return None

    def process_response(
        self, request: Request, response: Response, spider: Any = None
    ) -> Request | Response:
        hub = self.hub
        verdict = hub.classifier.classify_response(response, request)
        if request.callback is NO_CALLBACK:
            return self._internal(request, verdict) or response
        latency = request.meta.get("download_latency")
        if verdict.cls is C.OK:
            self._final_after_callback(request, verdict, response.status, latency)
            return response
        retry_after = None
        if verdict.cls in _RETRY_AFTER_CLASSES:
            header = response.headers.get(b"Retry-After")
            if header is not None:
                retry_after = parse_retry_after(header, self.clock())
        decision = hub.decide(request, verdict, retry_after)
        if (
            decision.retry
            and hub.retry_codes is not None
            and verdict.cls in _GATED
            and response.status not in hub.retry_codes
        ):
            decision = decision.__class__(False)  # the project's RETRY_HTTP_CODES does not list it
        if decision.retry:
            return self._retry(request, verdict, decision, status=response.status, latency=latency)
        if decision.gave_up:
            hub.gave_up(hub.outcome(request, verdict, status=response.status), decision)
        self._final_after_callback(request, verdict, response.status, latency)
        return response

    def _retry(self, request: Request, verdict: Any, decision: Any, **fields: Any) -> Request:
        """Send the attempt's non-final outcome and return the retry request."""
        hub = self.hub
        o = hub.outcome(request, verdict, final=False, retry_at=decision.not_before, **fields)
        new, avoid = hub.retry_request(request, o, decision)
        hub.emit(o.but(avoid_egress=avoid), request)
        return new

    def _internal(self, request: Request, verdict: Any) -> Request | None:
        """Scrapy's own downloads (robots.txt, media pipelines: callback NO_CALLBACK) go
        through ``engine.download_async``, which re-sends a returned request at once: no
        outcome for them (they are not crawl requests), and a retry is immediate."""
        if verdict.cls is C.OK:
            return None
        decision = self.hub.decide(request, verdict)
        if not decision.retry:
            return None
        new = request.copy()
        new.meta[meta.ATTEMPT] = int(request.meta.get(meta.ATTEMPT, 1)) + 1
        new.dont_filter = True
        self.hub.stats.inc_value(f"scale/retry_internal/{verdict.cls.value}")
        return new

    def _final_after_callback(
        self, request: Request, verdict: Any, status: int, latency: float | None
    ) -> None:
        hub = self.hub
        if hub.spider_mw_active:
            # the spider middleware sends it once the callback output is consumed, with the item count
            hub.pending[request] = (verdict, status, latency)
        else:
            hub.emit(hub.outcome(request, verdict, status=status, latency=latency), request)

    def process_exception(
        self, request: Request, exception: Exception, spider: Any = None
    ) -> Request | None:
        hub = self.hub
        if isinstance(exception, GaveUpError):
            return None
        verdict = hub.classifier.classify_exception(exception, request)
        if request.callback is NO_CALLBACK:
            return self._internal(request, verdict)
        t0 = hub.started.get(request)
        latency = self.clock() - t0 if t0 is not None else None
        decision = hub.decide(request, verdict)
        if decision.retry:
            return self._retry(request, verdict, decision, exception=exception, latency=latency)
        o = hub.outcome(request, verdict, exception=exception, latency=latency)
        hub.emit(o, request)
        if isinstance(exception, IgnoreRequest) or not verdict.expected:
            return None  # IgnoreRequest is not logged by Scrapy; a surprise keeps its traceback
        if decision.gave_up:
            hub.gave_up(o, decision)
        else:
            logger.warning(
                "Failed %s: %s (%s)",
                o.url,
                o.cls.value,
                o.reason or "-",
                extra={"spider": hub.crawler.spider},
            )
        if request.errback is None:
            raise GaveUpError(exception, o)
        return None


class OutcomeSpiderMiddleware:
    def __init__(self, hub: OutcomeHub):
        self.hub = hub
        hub.spider_mw_active = True

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> OutcomeSpiderMiddleware:
        return cls(OutcomeHub.of(crawler))

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        hub = self.hub
        st = hub.parse_state(response)
        check = hub.item_check
        req = response.request
        fp = req.meta.get(meta.FINGERPRINT) if req is not None else None
        try:
            async for x in result:
                if isinstance(x, Request):
                    if fp is not None and x.url == req.url and x.meta.get(meta.FINGERPRINT) == fp:  # type: ignore[union-attr]
                        hub.callback_retry(
                            response, st, x
                        )  # e.g. get_retry_request() in the callback
                elif x is not None:
                    st.items += 1
                    if check:
                        miss = check.missing(x)
                        if miss:
                            st.missing = tuple(sorted(set(st.missing).union(miss)))
                yield x
        except Exception as e:
            hub.finish_parse(response, st, e)
            raise
        hub.finish_parse(response, st)

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Any = None
    ) -> Iterable[Any] | None:
        hub = self.hub
        hub.finish_parse(response, hub.parse_state(response), exception)
        return None
