"""Delayed retries for schedulers that do not hold them.

A scheduler that keeps a request until its ``scale_not_before`` time says so (the
scrapy-scale frontier registers ``scheduler_holds_retries`` in the crawler's
:class:`~scrapy_scale.context.ScaleContext`; any other scheduler may set the class
attribute ``supports_not_before = True``). With any other scheduler, a retry that is
not due yet is held here in a reactor timer (nothing blocks) and handed to
``engine.crawl()`` when it is due. A held retry that never runs (the spider closed)
or a retry the scheduler dropped gets its chain's final outcome.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals as scrapy_signals
from scrapy.exceptions import DontCloseSpider, IgnoreRequest

from scrapy_scale import compat, meta_keys
from scrapy_scale import stats_keys as K
from scrapy_scale.clock import Clock
from scrapy_scale.context import ScaleContext
from scrapy_scale.meta_keys import NOT_BEFORE_TOLERANCE
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.emit import OutcomeEmitter
from scrapy_scale.outcomes.model import FailureClass

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_scale.outcomes")

C = FailureClass

#: timers fire this much after the not-before time, so they are never early
TIMER_SLACK = 0.005


class DelayedRetries:
    def __init__(self, crawler: Crawler, emitter: OutcomeEmitter, clock: Clock):
        self.crawler = crawler
        self.emitter = emitter
        self.clock = clock
        self.stats = crawler.stats
        self.held: dict[int, tuple[Any, Request]] = {}
        self.force_hold: set[int] = set()
        self._keys = itertools.count()
        self._holds: bool | None = None
        # request_scheduled is connected on first need (a receiver costs on every request)
        self._watching = False
        sig = crawler.signals
        sig.connect(self.request_dropped, signal=scrapy_signals.request_dropped)
        sig.connect(self.spider_opened, signal=scrapy_signals.spider_opened)
        sig.connect(self.spider_idle, signal=scrapy_signals.spider_idle)
        sig.connect(self.spider_closed, signal=scrapy_signals.spider_closed)

    def scheduler_holds(self) -> bool:
        """Does the scheduler keep requests until their not-before time?"""
        if self._holds is None:
            if ScaleContext.of(self.crawler).scheduler_holds_retries:
                self._holds = True
            else:
                sched = compat.engine_scheduler(self.crawler)
                if sched is None:
                    return False
                self._holds = bool(getattr(sched, "supports_not_before", False))
        return self._holds

    def spider_opened(self, spider: Any) -> None:
        self._holds = None
        self.scheduler_holds()

    def retry_made(self) -> None:
        """A retry request was made: make sure it will be held if the scheduler does not."""
        if not self._watching and not self.scheduler_holds():
            self.watch()

    def request_scheduled(self, request: Request, spider: Any) -> None:
        """Hold a request whose not-before is in the future in a reactor timer (not blocking)."""
        # the mark goes on every path: an id left behind would mark a later request that gets it
        forced = id(request) in self.force_hold
        self.force_hold.discard(id(request))
        nb = meta_keys.not_before_of(request.meta)
        if not nb:
            return
        now = self.clock()
        if nb <= now + NOT_BEFORE_TOLERANCE:
            return
        if not forced and self.scheduler_holds():
            return  # the scheduler holds it until it is eligible
        from twisted.internet import reactor

        key = next(self._keys)
        call = reactor.callLater(nb - now + TIMER_SLACK, self._release, key)  # type: ignore[attr-defined,arg-type]
        self.held[key] = (call, request)
        self.stats.inc_value(K.RETRY_HELD)
        raise IgnoreRequest("held until its not-before time")  # the engine then does not enqueue it

    def hold(self, request: Request) -> None:
        """Make :meth:`request_scheduled` hold this request even with a scheduler that holds."""
        self.force_hold.add(id(request))
        self.watch()

    def watch(self) -> None:
        if not self._watching:
            self._watching = True
            self.crawler.signals.connect(self.request_scheduled, signal=scrapy_signals.request_scheduled)

    def _release(self, key: int) -> None:
        entry = self.held.pop(key, None)
        if entry is None:
            return
        request = entry[1]
        engine = compat.engine_of(self.crawler)
        if engine is None or engine.spider is None:
            self.abandon(request, "spider closed")
            return
        engine.crawl(request)

    def spider_idle(self, spider: Any) -> None:
        if self.held:
            raise DontCloseSpider

    def abandon(self, request: Request, why: str) -> None:
        """A retry that will never be sent: its chain's final outcome."""
        last = request.meta.get(meta_keys.LAST_FAILURE) or [C.FATAL.value, ""]
        try:
            cls = FailureClass.parse(str(last[0]))
        except ValueError:
            cls = C.FATAL
        attempt = max(1, meta_keys.attempt_of(request.meta, 2) - 1)
        o = self.emitter.build(request, Verdict(cls, f"{last[1]} ({why})".strip()), attempt=attempt)
        self.stats.inc_value(K.RETRY_ABANDONED)
        self.emitter.send(o, request)

    def request_dropped(self, request: Request, spider: Any) -> None:
        """A retry or redirect of a chain that the scheduler refused: the chain ends here."""
        m = request.meta
        if meta_keys.FINGERPRINT not in m:
            return
        if meta_keys.attempt_of(m) > 1:
            self.abandon(request, "dropped by the scheduler")
        elif m.get("redirect_urls"):
            o = self.emitter.build(request, Verdict(C.OK, "redirect to a URL already seen"))
            self.emitter.send(o, request)

    def spider_closed(self, spider: Any, reason: str) -> None:
        for call, request in list(self.held.values()):
            if call.active():
                call.cancel()
            self.abandon(request, f"spider closed ({reason})")
        self.held.clear()
