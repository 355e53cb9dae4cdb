"""The Scrapy glue of the pool's sources (:mod:`.sources` decides): an egress file
checked for changes, a provider's ``fetch()`` called in a thread, one call at a time,
and the crawl's start waiting for the first call no longer than
``SCALE_EGRESS_PROVIDER_TIMEOUT``. Part of :class:`~.middleware.EgressMiddleware`.
"""

from __future__ import annotations

import logging
from typing import Any

from twisted.internet import threads

from scrapy_scale import stats_keys as K
from scrapy_scale.egress.identity import Egress
from scrapy_scale.egress.pool import EgressPool
from scrapy_scale.egress.shared import StateStore
from scrapy_scale.egress.sources import Refresher

logger = logging.getLogger("scrapy_scale.egress.middleware")


class SourceGlue:
    refresher: Refresher
    pool: EgressPool
    store: StateStore | None
    stats: Any

    def _first_fetch(self, d: Any) -> Any:
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

    def _refresh(self) -> Any:
        r = self.refresher
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
        d = threads.deferToThread(r.fetch)

        def ok(new: list[Egress]) -> None:
            r.end_call()
            r.fetched()
            self._replace(new)

        def failed(f: Any) -> None:
            r.end_call()
            warn, msg = r.failed(f.value)
            logger.log(logging.WARNING if warn else logging.DEBUG, msg)

        return d.addCallbacks(ok, failed)

    def _replace(self, new: list[Egress]) -> None:
        added, removed = self.pool.set_egresses(new)
        if added or removed:
            logger.info("egress: pool now %d egress(es) (%d added, %d removed)", len(new), len(added), len(removed))
            self.stats.set_value(K.EGRESS_POOL_SIZE, len(new))
            if self.store is not None:
                threads.deferToThread(self.store.set_pool, self.pool.members)
