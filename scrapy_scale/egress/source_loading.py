"""The Scrapy glue of the pool's sources (:mod:`.sources` decides): an egress file
checked for changes, a provider's ``fetch()`` called in a thread, one call at a time,
and the crawl's start waiting for the first call no longer than
``SCALE_EGRESS_PROVIDER_TIMEOUT``. :class:`SourceLoading` owns that state; the
:class:`~.middleware.EgressMiddleware` starts and stops it.

``fetch()`` runs in a :class:`~scrapy_scale.daemon_pool.DaemonThreadPool`, not in the
reactor's thread pool: the reactor joins its own threads at shutdown, so a ``fetch()``
that never returns would keep the process from exiting. An empty pool that its provider
never fills ends the crawl (:meth:`.sources.Refresher.give_up`), reason
``egress_unavailable``, exit status 1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from twisted.internet import threads

from scrapy_scale import exitcode
from scrapy_scale import stats_keys as K
from scrapy_scale.daemon_pool import DaemonThreadPool
from scrapy_scale.egress.identity import Egress
from scrapy_scale.egress.pool import EgressPool
from scrapy_scale.egress.shared import StateStore
from scrapy_scale.egress.sources import Refresher

logger = logging.getLogger("scrapy_scale.egress.middleware")


#: the finish reason of a crawl whose pool never had an egress
GAVE_UP = "egress_unavailable"


class SourceLoading:
    def __init__(
        self,
        crawler: Any,
        refresher: Refresher,
        pool: EgressPool,
        store: Callable[[], StateStore | None],
        exhausted: str,
    ):
        self.crawler = crawler
        self.stats = crawler.stats
        self.refresher = refresher
        self.pool = pool
        #: the pool's shared state, once the spider opened it
        self.store = store
        #: SCALE_EGRESS_EXHAUSTED: "close" ends a crawl whose pool stays empty
        self.exhausted = exhausted
        #: the provider's thread (started at its first call)
        self._fetch_pool: DaemonThreadPool | None = None
        #: the spider is open (the start's wait for the first fetch is over)
        self.open = False
        self._gave_up = False

    def first_fetch(self, d: Any) -> Any:
        """``d`` (the first provider call), or a timeout of SCALE_EGRESS_PROVIDER_TIMEOUT
        seconds, whichever comes first. The call is not cancelled (a thread cannot be):
        its result is taken whenever it returns, and no other call starts meanwhile."""
        from twisted.internet import defer, reactor

        waiter: defer.Deferred[None] = defer.Deferred()

        def over(_: Any = None) -> Any:
            if not waiter.called:
                waiter.callback(None)
            return _

        def timed_out() -> None:
            if not waiter.called:
                self.refresher.hung_warned = True
                logger.warning(
                    "egress: the provider's first fetch() has not returned after %.0f s "
                    "(SCALE_EGRESS_PROVIDER_TIMEOUT); starting with an empty pool: requests wait "
                    "until it returns",
                    self.refresher.timeout,
                )
                over()

        call: Any = reactor.callLater(self.refresher.timeout, timed_out)  # type: ignore[arg-type]
        d.addBoth(over)
        waiter.addBoth(lambda _: call.cancel() if call.active() else None)
        return waiter

    def refresh(self) -> Any:
        """Read the file if it changed, or call the provider when due (one call at a time)."""
        r = self.refresher
        self._maybe_give_up()
        ran = r.hung()
        if ran is not None:
            logger.warning(
                "egress: the provider's fetch() has not returned for %.0f s (SCALE_EGRESS_PROVIDER_TIMEOUT = "
                "%g); the pool keeps its egresses and no other call starts until it returns",
                ran,
                r.timeout,
            )
        if not r.due():
            return None
        if r.source.kind == "file":
            try:
                new = r.read_file()
            except ValueError as e:
                logger.error("egress: keeping the current pool: %s", e)
                return None
            if new is not None:
                self._replace(new)
            return None
        r.next_at = float("inf")  # one call at a time
        r.start_call()
        from twisted.internet import reactor

        if self._fetch_pool is None:
            self._fetch_pool = DaemonThreadPool(1, 1, name="scale-egress-provider")
            self._fetch_pool.start()
        d = threads.deferToThreadPool(reactor, self._fetch_pool, r.fetch)  # type: ignore[arg-type]

        def ok(new: list[Egress]) -> None:
            r.end_call()
            r.fetched()
            self._replace(new)

        def failed(f: Any) -> None:
            r.end_call()
            warn, msg = r.failed(f.value)
            logger.log(logging.WARNING if warn else logging.DEBUG, msg)

        return d.addCallbacks(ok, failed)

    def _maybe_give_up(self) -> None:
        """Close the spider when the pool has waited too long for its first egress."""
        if not self.open or self._gave_up or self.crawler.engine is None:
            return
        why = self.refresher.give_up(not self.pool.egresses, self.exhausted == "close")
        if why is None:
            return
        self._gave_up = True
        logger.error("egress: closing the spider (reason %s): %s", GAVE_UP, why)
        exitcode.request(1, f"egress: {why}", self.crawler)
        from scrapy.utils.defer import deferred_from_coro

        deferred_from_coro(self.crawler.engine.close_spider_async(reason=GAVE_UP))

    def stop(self) -> None:
        """At spider close: stop the provider's thread, unless a call still runs in it
        (stopping joins the thread; a daemon thread does not hold the exit)."""
        pool, self._fetch_pool = self._fetch_pool, None
        if pool is not None and self.refresher.calling is None:
            pool.stop()

    def _replace(self, new: list[Egress]) -> None:
        added, removed = self.pool.set_egresses(new)
        if added or removed:
            logger.info("egress: pool now %d egress(es) (%d added, %d removed)", len(new), len(added), len(removed))
            self.stats.set_value(K.EGRESS_POOL_SIZE, len(new))
            store = self.store()
            if store is not None:
                threads.deferToThread(store.set_pool, self.pool.members)
