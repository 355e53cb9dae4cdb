"""The egress pool's state shared with the other workers (Redis or SQLite,
:mod:`~scrapy_scale.egress.shared`): a sync every ``SCALE_EGRESS_SYNC`` seconds writes
this worker's health changes and counters and merges the others' (untrusted: what does
not decode is skipped, with one warning), one sync at a time, and a last one at close.
:class:`StateSync` owns the store, the running sync and the outage's log lines.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import threads

from scrapy_scale import stats_keys as K
from scrapy_scale.egress.events import EventReport, SyncOutage
from scrapy_scale.egress.pool import EgressPool
from scrapy_scale.egress.shared import StateStore, clean_live, live_workers
from scrapy_scale.redact import redact_text

logger = logging.getLogger("scrapy_scale.egress.middleware")


class StateSync:
    def __init__(
        self,
        pool: EgressPool,
        events: EventReport,
        stats: Any,
        worker: str,
        every: float,
        gauges: Callable[[], None],
    ):
        self.pool = pool
        self.events = events
        self.stats = stats
        self.worker = worker
        self.every = every
        #: the middleware's: the browser gauges written after each sync
        self.gauges = gauges
        #: the shared state, opened when the spider opens
        self.store: StateStore | None = None
        self._sync_d: Any = None  # the running sync, awaited at close before the last one
        self._syncing = False
        self.outage = SyncOutage()  # failing syncs: one line when they start, one when they work again

    def sync(self) -> Any:
        """One sync: this worker's changes written, the others' merged in (one at a time)."""
        if self._syncing or self.store is None:
            return None
        self._syncing = True
        dirty, counts, now = self.pool.take_dirty(), self.pool.counters(), time.time()
        d = threads.deferToThread(self.store.sync, self.worker, dirty, counts, now)

        def done(result: Any) -> None:
            records, live = result
            back = self.outage.succeeded(time.time())
            if back is not None:
                logger.info(
                    "egress: the pool's state syncs with %s again after %d failed syncs over %.0f s",
                    self.store and self.store.where,
                    *back,
                )
            for ev in self.pool.merge(records):
                self.events.report(ev)
            live, bad = clean_live(live, now)
            if bad:
                self.events.warn_once(
                    "live",
                    "egress: ignoring the last sync of worker(s) %s in the shared state (%s): not a time "
                    "(a finite number of epoch seconds, not far ahead)",
                    ", ".join(repr(w) for w in bad[:5]),
                    self.store and self.store.where,
                )
            self.pool.routes.workers = live_workers(live, now, self.every)
            for state, n in self.pool.pool_sizes().items():
                self.stats.set_value(K.egress_pool(state), n)
            self.gauges()

        def failed(f: Any) -> None:
            self.pool.dirty.update(dirty)  # written at the next sync
            if self.outage.failed(time.time()):  # once an outage; the recovery says how long it lasted
                logger.warning(
                    "egress: cannot sync the pool's state with %s: %s (retried at every sync; one line when it works)",
                    self.store and self.store.where,
                    f.getErrorMessage(),
                )

        def finally_(_: Any) -> None:
            self._syncing = False

        self._sync_d = d.addCallbacks(done, failed).addBoth(finally_)
        return self._sync_d

    async def close(self) -> None:
        """The last sync, after the one running (never two at once), then the store closed."""
        store = self.store
        if store is None:
            return
        if self._syncing and self._sync_d is not None:  # never two syncs at once, nor one after the close
            await maybe_deferred_to_future(self._sync_d)
        dirty, counts = self.pool.take_dirty(), self.pool.counters()

        def final() -> None:
            try:
                store.sync(self.worker, dirty, counts, time.time())
            finally:
                store.close()

        try:
            await maybe_deferred_to_future(threads.deferToThread(final))
        except Exception as e:  # the crawl's result stands; the state is one sync older
            logger.warning("egress: final sync with %s failed: %s", store.where, redact_text(str(e)))
