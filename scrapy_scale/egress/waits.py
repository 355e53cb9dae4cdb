"""Requests that wait for an egress: the log line of each episode, and the waits in place.

A crawl request with no egress goes back to the scheduler (``EgressMiddleware._wait``);
Scrapy's own downloads (robots.txt, the media pipelines' files) do not go through the
scheduler, so they wait here, in a reactor timer (no spinning), and fail with
:class:`~scrapy_scale.errors.NoEgressError` when the spider closes: never sent without
an egress (docs/egress.md, "Quarantine, re-probe, retirement").
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_scale import compat
from scrapy_scale import stats_keys as K
from scrapy_scale.egress.report import when
from scrapy_scale.errors import NoEgressError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_scale.egress.middleware")

#: a request waiting in place wakes this long after its time, so it is never early
TIMER_SLACK = 0.005
#: the longest nap of a request waiting in place before it looks whether the spider closes
NAP = 1.0

_WHAT = {
    "quarantined": "every egress is quarantined for it",
    "route_cap": "every route to it is at its capacity (learned, or SCALE_EGRESS_ROUTE_RATE)",
    "probing": "its only egresses are being re-probed",
    "empty": "the egress pool is empty",
}


class Waits:
    def __init__(self, crawler: Crawler, exhausted: str, max_wait: float):
        self.crawler = crawler
        self.stats = crawler.stats
        self.exhausted = exhausted
        #: the longest a request waits in place (seconds)
        self.max_wait = max_wait
        # domain -> the log level of its "waits" line, while its requests wait
        self.waiting: dict[str, int] = {}
        # the timers of the requests waiting in place
        self._naps: dict[Deferred[None], Any] = {}
        self.closed = False

    def note(self, domain: str, until: float, reason: str) -> None:
        """The stats and the log line (once an episode) of a request that waits for an egress."""
        assert self.stats is not None
        self.stats.inc_value(K.egress_wait(reason))
        if reason == "avoided":  # one retry waits for another egress; the domain goes on
            return
        # every route at its capacity is the pacing at work, not trouble: debug (it came in
        # bursts, a warning and an info line a request, while a site's routes were busy)
        level = logging.DEBUG if reason == "route_cap" else logging.WARNING
        if level > self.waiting.get(domain, logging.NOTSET):
            what = _WHAT.get(reason, reason)
            logger.log(level, "egress: %s waits until %s: %s; other domains go on", domain, when(until), what)
        self.waiting[domain] = max(level, self.waiting.get(domain, logging.NOTSET))
        if reason == "quarantined" and self.exhausted == "close" and self.crawler.engine is not None:
            from scrapy.utils.defer import deferred_from_coro

            logger.error("egress: closing the spider (SCALE_EGRESS_EXHAUSTED = close)")
            deferred_from_coro(self.crawler.engine.close_spider_async(reason="egress_exhausted"))

    def over(self, domain: str) -> None:
        """``domain`` has an egress again: one line if it was waiting."""
        level = self.waiting.pop(domain, None)
        if level is not None:
            logger.log(min(level, logging.INFO), "egress: %s has an egress again; its requests go on", domain)

    def check(self, domain: str, since: float) -> None:
        """Raise NoEgressError when a request waiting in place since ``since`` waited too long."""
        if time.time() - since > self.max_wait:
            raise NoEgressError(f"no egress for {domain} came back within {self.max_wait:.0f} s; never sent direct")

    async def nap(self, until: float) -> None:
        """Wait in place until ``until`` (reactor timers of at most NAP seconds, no
        spinning), or until the spider closes, which fails the request: it is never sent
        without an egress. The engine's close waits for the requests it holds, this one
        among them, so a nap ends within NAP seconds once the close has begun."""
        from twisted.internet import reactor  # (not at import: it would install the default reactor)

        assert self.stats is not None
        while True:
            if self.closed or compat.engine_closing(self.crawler):
                raise NoEgressError("the spider is closing: no egress came for it; never sent direct")
            left = until - time.time()
            if left <= 0:
                return
            self.stats.inc_value(K.EGRESS_WAITED_IN_PLACE)
            d: Deferred[None] = Deferred()
            call = reactor.callLater(min(left + TIMER_SLACK, NAP), d.callback, None)  # type: ignore[attr-defined,arg-type]
            self._naps[d] = call
            try:
                await maybe_deferred_to_future(d)
            finally:
                self._naps.pop(d, None)

    def close(self) -> None:
        """The spider closes: the requests waiting in place fail now."""
        self.closed = True
        for d, call in list(self._naps.items()):
            if call.active():
                call.cancel()
            if not d.called:
                d.callback(None)
