"""``scrapy_scale.frontier.Scheduler``: a Scrapy scheduler over the persisted frontier.

The reactor never waits for the store. This class is the one coordinator; each unit
owns its state and never calls back into it (the callables it is given are typed):

- the *outbox* (:class:`.local.Outbox`): ordered writes waiting for the next sync
  (enqueues, acks, failures, dead letters);
- the lease buffer (:mod:`.lease_buffer`): leased and memory-only requests, the pacer's
  pick and deferrals, the due timer;
- the in-flight ledger (:mod:`.ledger`): what was handed to the engine and how it
  settles (the ack contract, docs/architecture.md);
- what waits on its way to the buffer (:mod:`.waiting`): the outbox, the writes of a
  running sync, the store's counts;
- the store sync (:mod:`.sync`): the store thread and its lock; one plan in, one result
  out per round (writes in order, feed, heartbeat, renew, reclaim, the next lease);
- the sync rounds (:mod:`.rounds`): when a sync starts, its plan, what its result
  changes, whether the engine waits for one;
- the fingerprints it knows the store holds (:mod:`.known`, learned by the rounds): a
  plain request for one is the duplicate the store would answer, without asking it;
- the scheduler's life on the reactor (:mod:`.lifecycle`): the tick, the engine glue,
  the end (a close, or a reactor that stops first);
- record identity (:mod:`..records.identity`), joining a run (:mod:`.joining`) and the stats
  (:mod:`.stats`, :mod:`.scrapy_stats`).

A sync starts every 0.25 s, or at once when the buffer runs low or the outbox grows.
Children are enqueued before their parent's ack in the same ordered outbox, so a crash
never loses them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from typing import TYPE_CHECKING

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider
from twisted.internet import defer

from scrapy_scale import compat, startup
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as keys
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.records.identity import RecordIdentity, new_record, reopens
from scrapy_scale.frontier.scheduling import scrapy_scheduler_settings
from scrapy_scale.frontier.scheduling.engine_glue import stop_crawl
from scrapy_scale.frontier.scheduling.feed import FeedReader
from scrapy_scale.frontier.scheduling.joining import join_run, pick_worker
from scrapy_scale.frontier.scheduling.known import KnownFingerprints
from scrapy_scale.frontier.scheduling.lease_buffer import LeaseBuffer
from scrapy_scale.frontier.scheduling.ledger import InFlight, InFlightLedger
from scrapy_scale.frontier.scheduling.lifecycle import Lifecycle
from scrapy_scale.frontier.scheduling.local import Outbox
from scrapy_scale.frontier.scheduling.rounds import Rounds
from scrapy_scale.frontier.scheduling.scrapy_stats import ScrapyStats
from scrapy_scale.frontier.scheduling.stats import FrontierStats
from scrapy_scale.frontier.scheduling.sync import StoreSync, SyncResult
from scrapy_scale.frontier.scheduling.waiting import Waiting
from scrapy_scale.frontier.store import FrontierError, FrontierStore
from scrapy_scale.outcomes import send_fallback
from scrapy_scale.pids import pid_alive

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class Scheduler(BaseScheduler):
    """Persisted, lease-based scheduler; see docs/frontier.md."""

    #: retries with meta scale_not_before are held by the store (docs/frontier.md, "Retries")
    supports_not_before = True

    def __init__(
        self,
        crawler: Crawler,
        store: FrontierStore,
        *,
        batch: int,
        lease_seconds: float,
        wait_for_seeds: bool,
        worker: str | None,
        signal_mode: bool | None,
        error_deadline: float = 600.0,
        known: int = frontier_settings.KNOWN.default,
    ):
        self.crawler = crawler
        self.store = store
        self.batch = batch
        self.lease_seconds = lease_seconds
        self.wait_for_seeds = wait_for_seeds
        self.worker = worker or ""
        self._explicit_worker = worker is not None
        #: ack by outcomes (the outcome middlewares are on); None: read the crawler's context at attach
        self.signal_mode = signal_mode
        self.fingerprinter = crawler.request_fingerprinter
        self.spider: Spider | None = None
        #: what a record may name (classes, schemes); set from the settings at attach
        self.rules = codec.RecordRules()
        #: Scrapy/scrapy-redis scheduler settings the project set (frontier/scheduling/scrapy_scheduler_settings.py)
        self.scheduler_settings = scrapy_scheduler_settings.DEFAULT
        self.stats = crawler.stats
        #: the scale/frontier/* stats (frontier/scheduling/stats.py)
        self.frontier_stats = FrontierStats(crawler.stats)
        #: Scrapy's scheduler/* stats, with Scrapy's meaning (frontier/scheduling/scrapy_stats.py)
        self.scrapy_stats = ScrapyStats(crawler.stats)
        self.identity = RecordIdentity(self.fingerprinter)
        #: fingerprints the store holds, as far as this worker knows (frontier/scheduling/known.py)
        self.known = KnownFingerprints(known)
        self.outbox = Outbox()
        #: what waits on its way to the buffer (the outbox, a sync's writes, the store's counts)
        self.waiting = Waiting(self.outbox)
        self.buffer = LeaseBuffer(self.outbox, self.frontier_stats, self.scrapy_stats, due=lambda: self.rounds.due())
        self.inflight = InFlightLedger(
            self.outbox,
            self.frontier_stats,
            in_progress=lambda: compat.engine_requests_in_progress(crawler),
            fallback=lambda request, responded, items: _fallback(crawler, request, responded, items),
        )
        floor = crawler.settings.getint("CONCURRENT_REQUESTS", 16)  # a fair share is never below it
        self.sync = StoreSync(store, lease_seconds=lease_seconds, error_deadline=error_deadline, floor=floor)
        self.rounds = Rounds(
            sync=self.sync,
            waiting=self.waiting,
            buffer=self.buffer,
            inflight=self.inflight,
            stats=self.frontier_stats,
            scrapy_stats=self.scrapy_stats,
            batch=batch,
            known=self.known,
            wake_engine=lambda: compat.wake_engine(crawler),
            stop_crawl=lambda message: stop_crawl(crawler, self.frontier_stats, message),
        )
        #: the tick, the engine glue and the end (a close, or a reactor that stops first)
        self.lifecycle = Lifecycle(
            store=store,
            sync=self.sync,
            outbox=self.outbox,
            buffer=self.buffer,
            inflight=self.inflight,
            rounds=self.rounds,
            scrapy_stats=self.scrapy_stats,
            wait_for_seeds=wait_for_seeds,
            download_timeout=crawler.settings.getfloat("DOWNLOAD_TIMEOUT", 180.0),
        )

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        s = crawler.settings
        job = core_settings.JOB.get(s) or getattr(crawler.spidercls, "name", None)
        if not job:
            raise FrontierError("no job name: set SCALE_JOB or give the spider a name")
        # every setting is read (and so checked) before the store is opened: a bad value
        # must not leave a new file or an open connection behind
        url, state_dir = frontier_settings.frontier_url(s), core_settings.STATE_DIR.get(s)
        partitions = frontier_settings.PARTITIONS.get(s)
        options = {
            "batch": frontier_settings.BATCH.get(s),
            "lease_seconds": frontier_settings.LEASE.get(s),
            "wait_for_seeds": frontier_settings.WAIT_FOR_SEEDS.get(s),
            "worker": frontier_settings.WORKER.get(s),
            "error_deadline": frontier_settings.ERROR_DEADLINE.get(s),
            "known": frontier_settings.KNOWN.get(s),
        }
        try:
            store = open_store(url, job, state_dir=state_dir, partitions=partitions)
        except FrontierError as e:
            startup.cannot_start(e, str(e))
            raise
        ctx = ScaleContext.of(crawler)
        ctx.scheduler_holds_retries = True  # and keys requests by their real fingerprint
        ctx.frontier_on = True
        sched = cls(crawler, store, signal_mode=None, **options)
        sched.scheduler_settings = scrapy_scheduler_settings.read(s)
        for line in sched.scheduler_settings.warnings:
            logger.warning(line)
        return sched

    @property
    def engine_waits(self) -> bool:
        """next_request answered None (or the engine backed out) and no sync woke it since."""
        return self.rounds.engine_waits

    # ---- lifecycle -----------------------------------------------------------------------

    def open(self, spider: Spider) -> defer.Deferred[None] | None:
        self.attach(spider)
        self.sync.start_thread()
        self.lifecycle.start(compat.engine_of(self.crawler), self.has_work_for_this_worker, self.engine_backs_out)
        return None

    def attach(self, spider: Spider) -> None:
        """Join (or start) the run, pick the worker id, take back this worker's
        leases, connect the signals. ``open`` = this + the store thread and tick."""
        self.spider = spider
        self.rules = codec.RecordRules.for_crawl(spider, self.crawler.settings)
        ctx = ScaleContext.of(self.crawler)
        if self.signal_mode is None:
            self.signal_mode = ctx.outcomes_on
        self.inflight.signal_mode = bool(self.signal_mode)
        self.buffer.pacer = ctx.pacer
        self.buffer.transit.in_downloader = compat.downloader_active(self.crawler)
        self.buffer.slot_full = compat.slot_full_check(self.crawler, self.buffer.transit.pending)
        claim = None if self._explicit_worker else self._claim_worker
        self.worker = pick_worker(self.store, self.worker, claim, self.scheduler_settings.start_over)
        self.sync.worker = ctx.worker = self.worker
        self.sync.feed = FeedReader(self.crawler, spider, self.rules) if self.store.feed_key else None
        joined = join_run(self.store, self.worker, self.sync.beat)
        ctx.run_id, ctx.job = joined.run.run_id, self.store.job
        self.waiting.remote = joined.counts
        self.frontier_stats.inc(keys.FRONTIER_RECLAIMED, joined.reclaimed)
        self.frontier_stats.set(keys.FRONTIER_RUN, joined.run.run_id)
        self.frontier_stats.set(keys.FRONTIER_WORKER, self.worker)
        sig = self.crawler.signals
        sig.connect(self.inflight.on_outcome, signal=scale_signals.outcome)
        sig.connect(self.buffer.transit.arrived, signal=signals.request_reached_downloader)
        sig.connect(self.inflight.on_item, signal=signals.item_scraped)
        sig.connect(self.inflight.on_item, signal=signals.item_dropped)
        sig.connect(self.inflight.on_item, signal=signals.item_error)
        sig.connect(self.inflight.on_response, signal=signals.response_received)
        sig.connect(self._on_idle, signal=signals.spider_idle)

    def _claim_worker(self) -> str:
        return self.store.claim_worker(socket.gethostname(), os.getpid(), pid_alive)

    def close(self, reason: str) -> defer.Deferred[None]:
        d = self.lifecycle.close(reason)
        d.addCallback(self._closed)
        return d

    def _closed(self, _: None) -> None:
        # read by the quality report (it closes after the scheduler): a run drained by the
        # fleet is judged whole, whatever the close reason
        ScaleContext.of(self.crawler).run_drained = self.rounds.drained_at_close

    # ---- engine interface ------------------------------------------------------------------

    @property
    def remote(self) -> dict[str, int]:
        """The job's records by state, as of the last sync."""
        return self.waiting.remote

    def has_pending_requests(self) -> bool:
        return self.rounds.has_pending() or (not self.wait_for_seeds and self.rounds.end_unconfirmed())

    def __len__(self) -> int:
        """Requests waiting to be handed to the engine: buffered, in the outbox (or the
        sync writing it), pending or delayed in the store. Not those in flight."""
        return len(self.buffer) + self.waiting.queued()

    def has_work_for_this_worker(self) -> bool:
        """Is anything waiting that this worker could hand to the engine, now or after
        its next sync? Scrapy's ``scheduler_empty`` is sent only when not (see
        :mod:`.engine_glue`)."""
        return self.rounds.has_work_for_this_worker()

    def engine_backs_out(self) -> bool:
        """Must the engine send nothing now, though its downloader has room? Yes while it
        waits for a sync that brings it work (nothing buffered, or a higher priority on
        its way, and work for this worker): Scrapy's scheduler would have handed that
        request to the downloader already, so ``engine.needs_backout()`` says True (a
        lazy ``start()`` then waits for ``scheduler_empty``, see :mod:`.engine_glue`).
        Starts that sync, and has the engine woken after it."""
        if not self.rounds.backout_due():
            return False
        self.rounds.engine_waits_for_sync(backed_out=True)
        return True

    def enqueue_request(self, request: Request) -> bool:
        fp, update = self.identity.key(request, self.inflight.url_of)
        # a plain request (not a retry or redirect, not fetched again whatever its state)
        # whose record the store holds: the duplicate it would answer, without asking it
        plain = not update and not reopens(request, update, dedup=self.scheduler_settings.dedup)
        if plain and self.known.answered(fp):  # never, with SCALE_FRONTIER_KNOWN = 0: it learns nothing
            self.frontier_stats.inc(keys.FRONTIER_DEDUPLICATED)
            self.frontier_stats.inc(keys.FRONTIER_DEDUPLICATED_IN_WORKER)
            return True
        try:
            data = codec.encode(request, self.spider, self.rules)
        except codec.CodecError as e:
            prior = self.inflight.pop(fp) if update else None
            self.buffer.keep_in_memory(
                request,
                fp,
                update,
                e,
                worker=self.worker,
                lease_seconds=self.lease_seconds,
                prior_token=prior.token if prior is not None else None,
            )
            return True
        nr = new_record(request, fp, update, data, **self.scheduler_settings.record_options())
        if update:
            prior = self.inflight.pop(fp)  # its lease is void; the record will be leased anew
            if prior is not None:  # with its lease token: refused as stale if the lease passed on
                nr = dataclasses.replace(nr, token=prior.token)
        eligible = nr.not_before <= time.time()
        if not eligible:
            self.frontier_stats.inc(keys.FRONTIER_DELAYED)
            self.buffer.sync_at(nr.not_before)
        self.outbox.append(("enq", nr), request.priority if eligible else None)
        self.rounds.enqueued(eligible)
        return True

    def next_request(self) -> Request | None:
        while True:
            if self.rounds.engine_would_wait():
                # nothing buffered, or a request of higher priority than everything buffered
                # waits to be written and leased: the engine waits for that sync
                self.rounds.engine_waits_for_sync()
                return None
            entry = self.buffer.next_entry()
            if entry is None:  # every buffered request's site is held by the pacer (it wakes the engine)
                return None
            served = self.buffer.serve(entry, self.spider, self.rules)
            if served is None:  # a record that cannot be read: dead-lettered
                continue
            request = served.request
            if served.fingerprint is not None:  # acked as usual
                held = InFlight(served.token, request.url, served.attempts, request, handed_at=time.monotonic())
                self.inflight.add(served.fingerprint, held)
            if isinstance(entry, Request):  # kept in memory only
                return request
            break
        if self.buffer.unpaced() <= self.batch // 2:
            self.rounds.kick()
        return request

    def _on_idle(self, spider: Spider | None = None) -> None:
        if self.wait_for_seeds:
            raise DontCloseSpider
        if self.rounds.finished:
            return
        # nothing buffered, in flight or left anywhere (as of the last sync): end the run
        self.rounds.finish_requested = True
        self.rounds.kick()
        raise DontCloseSpider

    # ---- syncs -----------------------------------------------------------------------------

    def sync_blocking(self) -> SyncResult:
        """One sync in the calling thread (tests, tools): same as a tick's."""
        res = self.sync.run(self.rounds.plan())
        self.rounds.synced(res)
        return res


def _fallback(crawler: Crawler, request: Request, responded: bool, items: int) -> None:
    send_fallback(crawler, request, responded, items=items)
