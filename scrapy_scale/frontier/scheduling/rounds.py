"""Sync rounds: when a sync starts, what it is asked to do, and what its result changes.

:class:`Rounds` plans each sync from what waits (:mod:`.waiting`), the lease buffer
(:mod:`.lease_buffer`) and the in-flight ledger (:mod:`.ledger`), runs it through the
store sync (:mod:`.sync`), and applies its result: leased records into the buffer,
counts and stats, the engine woken when the sync brought what it waited for, the next
sync started at once when more is waiting. It also keeps whether the engine waits for a
sync. It calls back only the typed callables it was given (wake the engine, stop the
crawl); the scheduler calls it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from scrapy_scale import stats_keys as keys
from scrapy_scale.frontier.scheduling.known import KnownFingerprints
from scrapy_scale.frontier.scheduling.lease_buffer import LeaseBuffer
from scrapy_scale.frontier.scheduling.ledger import InFlightLedger
from scrapy_scale.frontier.scheduling.local import holds_back
from scrapy_scale.frontier.scheduling.scrapy_stats import ScrapyStats
from scrapy_scale.frontier.scheduling.stats import FrontierStats
from scrapy_scale.frontier.scheduling.sync import StoreSync, SyncPlan, SyncResult
from scrapy_scale.frontier.scheduling.waiting import Waiting
from scrapy_scale.frontier.store import Leased, StoreWaiting

logger = logging.getLogger(__name__)

#: the outbox is written at once (on the reactor thread) when it holds this many batches
OUTBOX_CAP = 16
#: seconds before another sync asks the store to finish the run when one did not (something
#: was left, or the store could not be asked)
FINISH_AGAIN = 1.0
#: feed messages one sync pops at most (at least SCALE_FRONTIER_BATCH); a sync that got
#: that many starts the next one at once. They wait in the worker's taken list until
#: written: a failed sync writes them again, a killed worker's go back to the feed once
#: its heartbeat expires (store.take_feed, docs/frontier.md)
FEED_PULL = 2000


class Rounds:
    def __init__(
        self,
        *,
        sync: StoreSync,
        waiting: Waiting,
        buffer: LeaseBuffer,
        inflight: InFlightLedger,
        stats: FrontierStats,
        scrapy_stats: ScrapyStats,
        batch: int,
        known: KnownFingerprints,
        wake_engine: Callable[[], object],
        stop_crawl: Callable[[str], None],
    ):
        self.sync = sync
        self.waiting = waiting
        self.buffer = buffer
        self.inflight = inflight
        self.stats = stats
        self.scrapy_stats = scrapy_stats
        self.batch = batch
        #: fingerprints the store holds, learned from its answers and leases (forgotten when a call fails)
        self.known = known
        #: wake the engine (it asks next_request again)
        self.wake_engine = wake_engine
        self.stop_crawl = stop_crawl
        #: no more syncs (the scheduler closes)
        self.closing = False
        #: next_request returned None since the last sync (wake the engine after the next)
        self.engine_waits = False
        #: engine_backs_out() said True: the sync that ends it wakes the engine (once)
        self.backed_out = False
        #: next_request returned None and nothing was leased or handed out since: the
        #: next request enqueued is written and leased at once (:meth:`enqueued`)
        self.engine_asked = False
        self._asked_at = 0  # buffer.served when it asked
        #: the spider went idle: the next sync finishes the run if nothing is left anywhere
        self.finish_requested = False
        #: this worker saw the run finish
        self.finished = False
        #: at close: the job's run was finished, or drained (nothing pending, delayed or
        #: leased: a fleet held open for seeds and stopped) - what the run's judges read
        self.drained_at_close = False
        #: when has_pending() last asked a sync to finish the run (monotonic)
        self._finish_asked = -FINISH_AGAIN
        #: the running (or last) sync asked the store for a lease
        self._sync_leases = False

    # ---- what the engine sees ----------------------------------------------------------

    def has_pending(self) -> bool:
        return bool(self.buffer) or self.waiting.any_write() or self.waiting.in_store()

    def end_unconfirmed(self) -> bool:
        """Nothing is left as of the last sync, and the run is not finished: a sync asks
        the store to finish it (nothing pending, delayed or leased anywhere, now), and
        until its answer requests may still come, so the engine must not call the spider
        idle yet. Then the spider's own idle handlers are called as often as under Scrapy:
        they were called once more while the scheduler's idle handler kept the spider open
        for that sync."""
        if self.finished or self.closing:
            return False
        now = time.monotonic()
        if not self.finish_requested and now - self._finish_asked >= FINISH_AGAIN:
            self._finish_asked = now
            self.finish_requested = True
            self.kick()
        return True

    def has_work_for_this_worker(self) -> bool:
        """Is anything waiting that this worker could hand to the engine, now or after
        its next sync? (Buffered, being written, or eligible in the store.)"""
        return bool(self.buffer) or self.waiting.for_this_worker()

    def engine_would_wait(self) -> bool:
        """Nothing buffered, or a request of higher priority than everything buffered
        waits to be written and leased: ``next_request`` answers None until a sync."""
        return not self.buffer or holds_back(self.waiting.top(), self.buffer.top_priority())

    def backout_due(self) -> bool:
        return not self.closing and self.engine_would_wait() and self.has_work_for_this_worker()

    def engine_waits_for_sync(self, backed_out: bool = False) -> None:
        """The engine waits for a sync (got None, or backed out): start it; the engine is
        woken after the sync that brings what it waits for."""
        self.engine_waits = True
        if backed_out:
            self.backed_out = True
        else:
            self.engine_asked, self._asked_at = True, self.buffer.served
        self.kick()

    # ---- starting syncs -----------------------------------------------------------------

    def kick(self) -> None:
        """Start a sync in the store thread, unless one runs, the scheduler closes, or
        failed syncs back off."""
        if self.closing or not self.sync.may_start():
            return
        self.sync.start(self.plan(), self.synced, self.failed)

    def due(self) -> None:
        """The due timer fired: sync now, or just after the running sync (it may have read
        the store too early)."""
        if self.sync.running is not None:
            self.buffer.sync_at(time.time() + 0.02)
            return
        self.kick()

    def enqueued(self, eligible: bool = True) -> None:
        """A request went into the outbox: write at once when it is large (on the reactor
        thread), sync now when it holds a batch.

        Also write (and lease) at once the first request ``eligible`` now that comes while
        the engine waits for one (it asked, got None, and nothing was leased or handed
        out since): Scrapy's scheduler hands such a request to the engine before anything
        enqueued after it. Written by the next sync with them instead, a lazy
        ``start()``'s request went after the child its first page yielded meanwhile
        (``1, 3, 2, 4`` in Scrapy's engine test ``test_lazy``). One write per time the
        engine asked (not one per duplicate of a resumed start())."""
        n = len(self.waiting.outbox)
        if self.engine_asked and eligible and not self.buffer and self.buffer.served == self._asked_at:
            self.engine_asked = False
            self.flush_now()
        elif n >= OUTBOX_CAP * self.batch or (
            # the engine backs out with nothing buffered and reads start() without coming
            # back to the reactor (so no sync ends): write and lease a batch now, or the
            # first download would wait for OUTBOX_CAP batches of start requests
            self.backed_out and not self.buffer and n >= self.batch
        ):
            self.flush_now()
        elif n >= self.batch:
            self.kick()

    def flush_now(self) -> None:
        """Write the outbox on the reactor thread, waiting for a running sync.

        Backpressure for a burst the reactor does not come back from (Scrapy
        consumes ``start()`` without yielding while the downloader is full): the
        outbox must stay bounded. Order holds: a running sync only has older ops,
        and it finishes (the lock) before these are written."""
        if self.sync.failing:
            return  # failing writes: they wait for the backoff (a burst while the disk is full)
        outbox = self.waiting.outbox
        ops = outbox.take()
        # an engine that waits for work (engine_backs_out) goes on reading start() without
        # coming back to the reactor: lease here too, or it would read all of start() first
        try:
            res = self.sync.flush(ops.ops, 0 if self.buffer else self.batch, len(self.inflight))
        except StoreWaiting:  # the store thread's rounds write them, waiting there
            outbox.put_back(ops)
            self.stats.inc(keys.FRONTIER_OUTBOX_FLUSHES_DEFERRED)
            return
        except Exception as e:  # noqa: BLE001 - keep the writes, in order; the syncs retry them
            outbox.put_back(ops)
            self.trouble(e)
            return
        self.waiting.flushed(ops)
        self.stats.inc(keys.FRONTIER_OUTBOX_FLUSHES)
        self.stats.writes(res)
        self.buffer.held_written(ops.ops, res.enqueued)
        self.scrapy_stats.written(ops.ops, res.enqueued)
        self.known.learn_written(ops.ops, res.enqueued)
        self.take_leased(res.leased)
        self.apply_counts(res)

    def take_leased(self, leased: list[Leased]) -> None:
        """Buffer what a sync or a flush leased; the engine has work again."""
        if leased:
            self.engine_asked = False
            self.known.learn_leased(leased)
        self.buffer.take_leased(leased)

    # ---- one sync --------------------------------------------------------------------------

    def plan(self) -> SyncPlan:
        """The next sync's work; it takes the outbox (written by that sync: its result goes
        to :meth:`synced`, or its failure to :meth:`failed`)."""
        ops = self.waiting.take().ops
        b = self.buffer
        want = self.waiting.lease_want(ops, b.top_priority(), b.ready(), len(b), self.batch)
        self._sync_leases = want > 0
        renew = b.fingerprints() + list(self.inflight) if self.sync.renew_due() else None
        reclaim = self.sync.reclaim_due()
        finish = self.finish_requested and not ops and not b and not self.inflight
        if finish:
            self.finish_requested = False
        feed = max(self.batch, FEED_PULL) if self.sync.store.feed_key else 0
        held = len(b) + len(self.inflight)
        return SyncPlan(ops, want, held, renew, reclaim, finish, feed)

    def synced(self, res: SyncResult) -> None:
        """A sync planned by :meth:`plan` ended with ``res``."""
        written = self.waiting.written()
        self.sync.succeeded()
        self.stats.synced(res)
        if written is not None:
            self.buffer.held_written(written.ops, res.enqueued)
        self.scrapy_stats.written(written.ops if written is not None else [], res.enqueued, res.feed_added)
        if written is not None:
            self.known.learn_written(written.ops, res.enqueued)
        self.take_leased(res.leased)
        self.apply_counts(res)
        if res.finished_run and not self.finished:
            self.finished = True
            logger.info("frontier: job %r drained; run finished: %s", self.sync.store.job, res.counts)
        self.waiting.carry(self._sync_leases, written, self.buffer.top_priority())
        if self.closing:
            return
        if (
            res.leased
            or res.finished_run
            or (self.engine_waits and not self.engine_would_wait())
            # idle now: an engine that asked (and got None) looks again at once. Not one that
            # never asked: woken by the first tick's sync before its start() had given
            # anything, the engine sent scheduler_empty that plain Scrapy never sends then,
            # and a lazy spider added its next request ahead of its first (2, 1, 3, ...)
            or (self.engine_waits and not self.has_pending())
            # a backout that ended with nothing leased (a duplicate, another worker's lease):
            # the engine asks again now, not at its next heartbeat (a lazy start() waits
            # for the scheduler_empty that answer sends)
            or (self.backed_out and not self.backout_due())
        ):
            self.backed_out = False
            # new work, or maybe idle (or no longer held back) now: let the engine look at once.
            # Not after a sync that changed nothing the engine waits for: it would ask again at
            # once, kick another sync, and so on, as fast as the store answers, for as long as
            # every pending record is delayed (a sync of its own wakes it at the first one's time)
            self.engine_waits = False
            self.wake_engine()
        outbox = self.waiting.outbox
        if self.buffer.unpaced() <= self.batch // 2 and (res.leased or outbox.enqueues):
            # more to lease, or new requests (children) that arrived during this sync and
            # are leasable as soon as they are written: do not let them wait for the tick
            # (the engine may have asked, got None and now waits for a wake-up)
            self.kick()
        elif res.feed_full or len(outbox) >= self.batch or holds_back(self.waiting.top(), self.buffer.top_priority()):
            self.kick()

    def failed(self, error: BaseException) -> None:
        """A sync planned by :meth:`plan` failed: keep its writes (in order, ahead of newer
        ones) for the next one; stop the crawl for an error that cannot pass."""
        self.waiting.put_back()
        self.trouble(error)

    def trouble(self, error: BaseException) -> None:
        self.stats.inc(keys.FRONTIER_SYNC_ERRORS)
        self.known.forget()  # a failover may have lost writes: learn again from the store as it is
        why = self.sync.failed(error)
        if why is not None and self.sync.give_up(why):
            self.stop_crawl(why)

    def closed(self, ops: list[tuple[str, Any]], res: SyncResult, reason: str) -> None:
        """The final writes (``ops``, planned at close) ended with ``res``."""
        self.stats.writes(res)
        self.scrapy_stats.written(ops, res.enqueued)
        self.apply_counts(res)
        # job-wide (this run), every worker's: the run summary and the exit status read it
        self.stats.set(keys.FRONTIER_DEAD_LETTERS, res.dead_letters)
        c = res.counts
        left = (c.get("pending"), c.get("delayed"), c.get("leased")) if c else None
        self.drained_at_close = res.finished_run or self.finished or left == (0, 0, 0)
        self.stats.inc(keys.FRONTIER_RELEASED, res.released)
        logger.info(
            "frontier closed (%s): %s; released %d lease(s)%s",
            reason,
            res.counts,
            res.released,
            "; run finished" if res.finished_run or self.finished else "",
        )

    def apply_counts(self, res: SyncResult) -> None:
        if not res.counts:
            return
        self.waiting.remote = res.counts
        self.stats.counts(res.counts)
