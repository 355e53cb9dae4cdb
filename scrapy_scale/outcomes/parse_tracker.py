"""The final outcome of a response, once its callback's output was consumed.

The downloader middleware hands a response's verdict over (:meth:`ParseTracker.await_callback`);
the spider middleware counts the items the callback yields, checks them
(``SCALE_CRITICAL_FIELDS``), and when the output ends (or the callback raises) asks the
classifier for the verdict after the parse checks (:meth:`Classifier.classify_parse`) and
sends the final outcome.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.http import Request

from scrapy_scale import meta_keys
from scrapy_scale import stats_keys as K
from scrapy_scale.clock import Clock
from scrapy_scale.outcomes._log import FirstFew
from scrapy_scale.outcomes.classify import Classifier, Verdict
from scrapy_scale.outcomes.emit import OutcomeEmitter
from scrapy_scale.outcomes.model import FailureClass
from scrapy_scale.outcomes.parse_checks import ItemCheck, expected_items

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger("scrapy_scale.outcomes")

C = FailureClass


@dataclass
class Pending:
    """A response's verdict waiting for its callback: what the final outcome will say."""

    verdict: Verdict
    status: int | None
    latency: float | None
    #: a give-up decided by the downloader middleware ("budget", "dont_retry", ...)
    gave_up: str | None = None


@dataclass
class ParseState:
    pending: Pending
    items: int = 0
    #: requests the callback yielded (its own retry aside)
    requests: int = 0
    missing: tuple[str, ...] = ()
    done: bool = False
    #: the callback yielded a retry of its own request (same fingerprint and URL)
    retried: bool = False


class ParseTracker:
    def __init__(self, crawler: Crawler, classifier: Classifier, emitter: OutcomeEmitter, critical: Any, clock: Clock):
        self.crawler = crawler
        self.classifier = classifier
        self.emitter = emitter
        self.clock = clock
        self.item_check = ItemCheck(critical)
        self.log = FirstFew(logger)
        self._inc = crawler.stats.inc_value
        self.waiting: weakref.WeakKeyDictionary[Request, Pending] = weakref.WeakKeyDictionary()
        self.states: weakref.WeakKeyDictionary[Response, ParseState] = weakref.WeakKeyDictionary()

    def await_callback(self, request: Request, pending: Pending) -> None:
        self.waiting[request] = pending

    def state(self, response: Response) -> ParseState:
        st = self.states.get(response)
        if st is None:
            request = response.request
            pending = self.waiting.pop(request, None) if request is not None else None
            if pending is None:  # the downloader middleware did not see it (used alone)
                req = request or Request(response.url)
                v = self.classifier.classify_response(response, req)
                pending = Pending(v, response.status, req.meta.get("download_latency"))
            st = self.states[response] = ParseState(pending)
        return st

    def item(self, st: ParseState, item: Any) -> None:
        st.items += 1
        if self.item_check:
            miss = self.item_check.missing(item)
            if miss:
                st.missing = tuple(sorted(set(st.missing).union(miss)))

    def callback_retry(self, response: Response, st: ParseState, retry: Request) -> None:
        """The callback retries its own request (Scrapy's ``get_retry_request``): this attempt's
        outcome becomes non-final and the retry continues the chain as the next attempt."""
        request = response.request
        attempt = meta_keys.attempt_of(request.meta) if request is not None else 1
        retry.meta[meta_keys.ATTEMPT] = attempt + 1
        cls = st.pending.verdict.cls if st.pending.verdict.cls is not C.OK else C.PARSE_FAILED
        retry.meta[meta_keys.LAST_FAILURE] = [cls.value, "retried by the callback"]
        st.retried = True

    def finish(self, response: Response, st: ParseState, error: BaseException | None = None) -> None:
        if st.done:
            return
        st.done = True
        p = st.pending
        request = response.request or Request(response.url)
        verdict, kind = self.classifier.classify_parse(
            p.verdict,
            error=error,
            missing=st.missing,
            items=st.items,
            expects_items=self._expects_items(request) if st.items == 0 else False,
            retried_by_callback=st.retried,
        )
        if kind is not None:
            self._inc(K.PARSE_FAILED + kind)
            self.log(kind, "parse_failed (%s) %s", verdict.reason, request.url, extra={"spider": self.crawler.spider})
        if st.retried:
            o = self.emitter.build(
                request, verdict, status=p.status, latency=p.latency, items=st.items, final=False, retry_at=self.clock()
            ).but(callback_retry=True)
        else:
            gave_up = p.gave_up if verdict.cls is p.verdict.cls else None
            o = self.emitter.build(
                request,
                verdict,
                status=p.status,
                latency=p.latency,
                items=st.items,
                requests=st.requests,
                gave_up=gave_up,
            )
        self.emitter.send(o, request)

    def _expects_items(self, request: Request) -> bool:
        spider = self.crawler.spider
        cb = request.callback or getattr(spider, "parse", None)
        return expected_items(request.meta, cb, spider)
