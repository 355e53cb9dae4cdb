"""``scrapy_scale.frontier.Scheduler``: a Scrapy scheduler over the persisted frontier.

The reactor never waits for the store. The scheduler keeps three small things in
memory -- an *outbox* of writes (enqueues, acks, failures, dead letters, in
order), a *buffer* of leased requests (at most ``SCALE_FRONTIER_BATCH``), and the
*in-flight* table (leased requests handed to the engine, not yet acked) -- and a
single store thread "syncs" them: it writes the outbox in order (one SQLite
transaction; Redis scripts in order), renews leases, reclaims expired ones, pulls
feeder seeds and leases the next batch. A sync starts every 0.25 s, or at once
when the buffer runs low or the outbox grows.

Ack (contract 3 of HELPERS_COMMON.md): a request is acked when its final outcome
(the ``scrapy_scale.signals.outcome`` signal) is done-class and ``outcome.items``
item signals (item_scraped/dropped/error) were seen for it; a terminal failure is
recorded with its class and reason. Without the outcome middlewares (plain
Scrapy), a request is acked when the engine has finished with it (its response
went through the callback and the item pipelines). Children are enqueued before
their parent's ack in the same ordered outbox, so a crash never loses them.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.misc import build_from_crawler
from twisted.internet import defer, task, threads
from twisted.python.threadpool import ThreadPool

from scrapy_scale import compat, exitcode, meta, settings_core, startup
from scrapy_scale import signals as scale_signals
from scrapy_scale.context import ScaleContext
from scrapy_scale.errors import ItemDeadLettered, ItemNotStored
from scrapy_scale.frontier import codec, pacing
from scrapy_scale.frontier import scrapy_settings as frontier_compat
from scrapy_scale.frontier import settings as frontier_settings
from scrapy_scale.frontier.engine_glue import DaemonThreadPool, install_backout, install_empty_gate
from scrapy_scale.frontier.local import LocalQueue, Outbox, holds_back, lease_wanted, max_opt
from scrapy_scale.frontier.policy import SyncTrouble
from scrapy_scale.frontier.scrapy_stats import ScrapyStats
from scrapy_scale.frontier.seeding import UrlSeeds
from scrapy_scale.frontier.store import (
    EnqueueResult,
    FrontierError,
    FrontierStore,
    Leased,
    NewRequest,
    again_key,
    domain_of,
    key_base,
    open_store,
)
from scrapy_scale.outcomes import send_fallback
from scrapy_scale.pids import pid_alive
from scrapy_scale.redact import redact_text

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_scale.outcomes.model import Outcome

logger = logging.getLogger(__name__)

TICK = 0.25
#: the outbox is written at once (on the reactor thread) when it holds this many batches
OUTBOX_CAP = 16
#: with a pacer, the buffer holds at most this many batches (requests it holds included)
HELD_CAP = 4
#: feed messages one sync pops at most (at least SCALE_FRONTIER_BATCH); a sync that got
#: that many starts the next one at once. They wait in the worker's taken list until
#: written: a failed sync writes them again, a killed worker's go back to the feed once
#: its heartbeat expires (store.take_feed, docs/frontier.md)
FEED_PULL = 2000
#: seconds after the engine finished a request with no final outcome before the
#: scheduler acks it itself (signal mode; a missing outcome must not hang a job)
OUTCOME_GRACE = 10.0
#: longest wait for the last writes when the reactor stops before the spider closed
SHUTDOWN_WRITE_SECONDS = 3.0
#: a worker's heartbeat holds for its lease, at most this many seconds (then status says
#: the worker is gone); it beats four times per such window
HEARTBEAT_WINDOW = 30.0


@dataclass
class InFlight:
    token: int
    url: str
    attempts: int
    request: Request | None = None
    items_expected: int | None = None
    items_seen: int = 0
    responded: bool = False
    #: monotonic time the engine was first seen done with the request
    left_at: float | None = None
    #: the ack/fail to write once the engine lets go of the request (see _settle)
    settled: tuple[str, Any] | None = None
    #: an item of it could not be stored (ItemNotStored): never ack; released at close
    unstored: bool = False
    #: why an item of it went to the dead letter (ItemDeadLettered): failed, not acked
    item_failure: str | None = None


@dataclass
class SyncResult:
    enqueued: list[EnqueueResult] = field(default_factory=list)
    #: acks / failures the store took (the lease token was still this worker's)
    acked: int = 0
    failed: int = 0
    #: acks and failures the store refused: the lease had expired and passed to another
    #: worker (a frozen worker coming back), so another attempt's result counts instead
    stale: int = 0
    dead: int = 0
    leased: list[Leased] = field(default_factory=list)
    reclaimed: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    finished_run: bool = False
    feed_bad: int = 0
    #: plain URL feed seeds written with enqueue_new: new ones, known ones
    feed_added: int = 0
    feed_known: int = 0
    #: the feed had at least as many messages as the sync pops
    feed_full: bool = False
    seconds: float = 0.0
    #: dead letters of the run, job-wide (read at close)
    dead_letters: int = 0


class Scheduler(BaseScheduler):
    """Persisted, lease-based scheduler; see docs/frontier.md."""

    #: retries with meta scale_not_before are held by the store (contract 2)
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
    ):
        self.crawler = crawler
        self.stats = crawler.stats
        #: Scrapy's scheduler/* stats, with Scrapy's meaning (frontier/scrapy_stats.py)
        self.scrapy_stats = ScrapyStats(crawler.stats)
        self.store = store
        self.batch = batch
        self.lease_seconds = lease_seconds
        self.wait_for_seeds = wait_for_seeds
        self.worker = worker or ""
        self._beat_window = min(lease_seconds, HEARTBEAT_WINDOW)
        self._last_beat = 0.0
        self._explicit_worker = worker is not None
        #: ack by outcomes (the outcome middlewares are on); None: read the crawler's context at attach
        self.signal_mode = signal_mode
        self.fingerprinter = crawler.request_fingerprinter
        self._feed_fp: Any = None
        self.spider: Spider | None = None
        #: what a record may name (classes, schemes); set from the settings at attach
        self.rules = codec.RecordRules()
        self.outbox = Outbox()
        #: the outbox a running sync took (its enqueues count as pending until it is done)
        self._sync_ops: Outbox | None = None
        #: an eligible priority written by a sync that leased nothing, above the buffer's best
        self._pending_top: int | None = None
        #: next_request returned None since the last sync (wake the engine after the next)
        self._engine_waits = False
        #: engine_backs_out() said True: the sync that ends it wakes the engine (once)
        self._backed_out = False
        #: the running (or last) sync asked the store for a lease
        self._sync_leases = False
        #: leased records and memory-only requests, served by priority (FIFO within one)
        self.buffer: LocalQueue[Leased | Request] = LocalQueue()
        self._mem_n = 0
        #: requests kept in memory whose dedup record the next sync writes (by id of its NewRequest)
        self._held_waiting: dict[int, Request] = {}
        #: fingerprint -> lease token of requests kept in memory whose record this worker holds
        self._held_tokens: dict[str, int] = {}
        #: the pacer (the throttle) asked which buffered requests may go; None: no pacing
        self._pacer: pacing.Pacer | None = None
        #: buffered requests the pacer held at its last look
        self._held = 0
        #: is a host's download slot full (its requests then wait here, not in the slot); None: unknown
        self._slot_full: Callable[[str], bool] | None = None
        #: a sync at the next not-before time of a request this worker delayed
        self._due_timer: Any = None
        self._due_at = math.inf
        self.inflight: dict[str, InFlight] = {}
        self.remote: dict[str, int] = {"pending": 0, "delayed": 0, "leased": 0, "done": 0, "failed": 0}
        self._synced_once = False
        self._sync_running: defer.Deferred[Any] | None = None
        self._pool: ThreadPool | None = None
        self._loop: task.LoopingCall | None = None
        self._last_renew = time.monotonic()
        self._last_reclaim = 0.0
        self._finish_requested = False
        self._finished = False
        self._closing = False
        self._wait_sum = 0.0
        self._wait_n = 0
        self._sync_seconds = 0.0
        #: held while the store is in use (the store thread, or a flush on the reactor thread)
        self._store_lock = threading.Lock()
        self._warned_unserializable = False
        self._warned_scheme = False
        #: Scrapy/scrapy-redis scheduler settings the project set (frontier/scrapy_settings.py)
        self.compat = frontier_compat.DEFAULT
        self._remove_gate: Callable[[], None] = lambda: None
        self._shutdown_trigger: Any = None
        #: backoff, bounded logging and the deadline of failing syncs
        self._trouble = SyncTrouble(error_deadline)
        #: why the frontier stopped the crawl (lost state, corrupt file, deadline), else None
        self._fatal: str | None = None

    # ---- construction ------------------------------------------------------------------

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> Scheduler:
        s = crawler.settings
        url = frontier_settings.frontier_url(s)
        job = settings_core.JOB.get(s) or getattr(crawler.spidercls, "name", None)
        if not job:
            raise FrontierError("no job name: set SCALE_JOB or give the spider a name")
        batch = frontier_settings.BATCH.get(s)
        lease_seconds = frontier_settings.LEASE.get(s)
        wait = frontier_settings.WAIT_FOR_SEEDS.get(s)
        worker = frontier_settings.WORKER.get(s)
        state_dir = settings_core.STATE_DIR.get(s)
        try:
            store = open_store(url, job, state_dir=state_dir)
        except FrontierError as e:
            logger.error("scrapy-scale frontier cannot start: %s", e)
            raise
        ctx = ScaleContext.of(crawler)
        ctx.scheduler_holds_retries = True  # and keys requests by their real fingerprint
        ctx.frontier_on = True
        sched = cls(
            crawler,
            store,
            batch=batch,
            lease_seconds=lease_seconds,
            wait_for_seeds=wait,
            worker=worker,
            signal_mode=None,
            error_deadline=frontier_settings.ERROR_DEADLINE.get(s),
        )
        sched.compat = frontier_compat.read(s)
        for line in sched.compat.warnings:
            logger.warning(line)
        return sched

    # ---- lifecycle -----------------------------------------------------------------------

    def open(self, spider: Spider) -> defer.Deferred[None] | None:
        self.attach(spider)
        self._pool = DaemonThreadPool(1, 1, name="scale-frontier")
        self._pool.start()
        self._loop = task.LoopingCall(self._tick)
        self._loop.start(TICK, now=False)
        engine = compat.engine_of(self.crawler)
        remove_gate = install_empty_gate(engine, self.has_work_for_this_worker)
        remove_backout = install_backout(engine, self.engine_backs_out)
        self._remove_gate = lambda: (remove_gate(), remove_backout())[-1]
        self._shutdown_trigger = _reactor().addSystemEventTrigger("before", "shutdown", self._on_reactor_shutdown)
        return None

    def _on_reactor_shutdown(self) -> defer.Deferred[Any] | None:
        """The reactor stops without the spider being closed (a second Ctrl-C): write
        what is settled (outbox, finished acks) within SHUTDOWN_WRITE_SECONDS, then let
        the process exit (the store thread is a daemon). Leases stay; the restarted
        worker takes them back at once."""
        if self._closing or self._pool is None:
            return None
        self._closing = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._ack_finished_by_engine(closing=True)
        ops = self.outbox.take().ops
        logger.warning(
            "frontier: the reactor stops before the spider closed; writing %d settled op(s), "
            "leases are taken back by the next run",
            len(ops),
        )

        def work() -> None:
            with self._store_lock:
                self._write_ops(ops, SyncResult())
                self.store.heartbeat(self.worker, self.store.clock())  # this worker has stopped

        d = self._in_thread(work)
        d.addTimeout(SHUTDOWN_WRITE_SECONDS, _reactor())
        d.addErrback(lambda f: logger.error("frontier: final write at shutdown failed: %s", f.getErrorMessage()))
        return d

    def attach(self, spider: Spider) -> None:
        """Join (or start) the run, pick the worker id, take back this worker's
        leases, connect the signals. ``open`` = this + the store thread and tick."""
        self.spider = spider
        self.rules = codec.RecordRules.for_crawl(spider, self.crawler.settings)
        ctx = ScaleContext.of(self.crawler)
        if self.signal_mode is None:
            self.signal_mode = ctx.outcomes_on
        self._pacer = ctx.extra.get("pacer")
        self._slot_full = compat.slot_full_check(self.crawler)
        claim = None if self._explicit_worker else self._claim_worker
        if claim is not None:
            self.worker = claim()
        if self.compat.start_over:
            self.worker = frontier_compat.start_over(self.store, self.compat.start_over, self.worker, claim)
        warning = self.store.durability_warning()
        if warning:
            logger.warning("frontier: %s", warning)
        run = self.store.begin_run()
        ctx.run_id = run.run_id
        ctx.job = self.store.job
        self._beat()
        ctx.worker = self.worker
        reclaimed = self.store.reclaim(self.worker)
        self.remote = self.store.counts()
        self._synced_once = True
        self._inc("reclaimed", reclaimed)
        self.stats.set_value("scale/frontier/run", run.run_id)
        self.stats.set_value("scale/frontier/worker", self.worker)
        logger.info(
            "frontier %s job %r run %d (%s) worker %s: %s; took back %d lease(s)",
            type(self.store).__name__,
            self.store.job,
            run.run_id,
            "resumed" if run.resumed else "new",
            self.worker,
            self.remote,
            reclaimed,
        )
        sig = self.crawler.signals
        sig.connect(self._on_outcome, signal=scale_signals.outcome)
        sig.connect(self._on_item, signal=signals.item_scraped)
        sig.connect(self._on_item, signal=signals.item_dropped)
        sig.connect(self._on_item, signal=signals.item_error)
        sig.connect(self._on_response, signal=signals.response_received)
        sig.connect(self._on_idle, signal=signals.spider_idle)

    def _claim_worker(self) -> str:
        return self.store.claim_worker(socket.gethostname(), os.getpid(), pid_alive)

    def close(self, reason: str) -> defer.Deferred[None]:
        self._closing = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._due_timer is not None and self._due_timer.active():
            self._due_timer.cancel()
        return defer.ensureDeferred(self._close(reason))

    async def _close(self, reason: str) -> None:
        self._remove_gate()
        while self._sync_running is not None:
            await self._sync_running
        self._ack_finished_by_engine(closing=True)
        held = self._buffered_fps() + list(self.inflight)
        ops = self.outbox.take().ops
        finish = reason == "finished" and not self.wait_for_seeds
        if self._fatal is not None:  # the store cannot be trusted with more writes
            logger.error("frontier closed without its final writes: %s", self._fatal)
            self.store.close()
            if self._pool is not None:
                self._pool.stop()
            return

        def work() -> tuple[SyncResult, int]:
            res = SyncResult()
            with self._store_lock:
                return self._final_writes(ops, held, finish, res)

        try:
            res, released = await self._in_thread(work)
            self._count_writes(res)
            self.scrapy_stats.written(ops, res.enqueued)
            self._apply_counts(res)
            # job-wide (this run), every worker's: the run summary and the exit status read it
            self.stats.set_value("scale/frontier/dead_letters", res.dead_letters)
            self._inc("released", released)
            logger.info(
                "frontier closed (%s): %s; released %d lease(s)%s",
                reason,
                res.counts,
                released,
                "; run finished" if res.finished_run or self._finished else "",
            )
        except Exception:  # noqa: BLE001 - closing must not raise; leases expire anyway
            logger.exception("frontier: final write failed; unacked leases will expire and be retried")
        finally:
            self.buffer.clear()
            self._mem_n = 0
            self._held_waiting.clear()
            self._held_tokens.clear()
            self.inflight.clear()
            self.scrapy_stats.clear()
            self.store.close()
            if self._pool is not None:
                self._pool.stop()
            if self._shutdown_trigger is not None:
                _reactor().removeSystemEventTrigger(self._shutdown_trigger)
                self._shutdown_trigger = None

    def _final_writes(
        self, ops: list[tuple[str, Any]], held: list[str], finish: bool, res: SyncResult
    ) -> tuple[SyncResult, int]:
        self._write_ops(ops, res)
        released = self.store.release(self.worker, held) if held else 0
        self.store.heartbeat(self.worker, self.store.clock())  # this worker has stopped
        if finish:
            res.finished_run = self.store.finish_run() is not None
        res.counts = self.store.counts()
        res.dead_letters = self.store.dead_letter_count()
        return res, released

    # ---- engine interface ------------------------------------------------------------------

    def has_pending_requests(self) -> bool:
        if self.buffer or self.outbox or (self._sync_ops is not None and self._sync_ops.enqueues):
            return True
        r = self.remote
        return bool(r["pending"] or r["delayed"] or r["leased"])

    def __len__(self) -> int:
        """Requests waiting to be handed to the engine: buffered, in the outbox (or the
        sync writing it), pending or delayed in the store. Not those in flight."""
        writing = self._sync_ops.enqueues if self._sync_ops is not None else 0
        return len(self.buffer) + self.outbox.enqueues + writing + self.remote["pending"] + self.remote["delayed"]

    def has_work_for_this_worker(self) -> bool:
        """Is anything waiting that this worker could hand to the engine, now or after
        its next sync? (Buffered, being written, or eligible in the store.) Scrapy's
        ``scheduler_empty`` is sent only when not (see :mod:`.engine_glue`)."""
        if self.buffer or self.outbox.enqueues or self._pending_top is not None:
            return True
        if self._sync_ops is not None and self._sync_ops.enqueues:
            return True
        return bool(self.remote["pending"])

    def engine_backs_out(self) -> bool:
        """Must the engine send nothing now, though its downloader has room? Yes while it
        waits for a sync that brings it work (nothing buffered, or a higher priority on
        its way, and work for this worker): Scrapy's scheduler would have handed that
        request to the downloader already, so ``engine.needs_backout()`` says True (a
        lazy ``start()`` then waits for ``scheduler_empty``, see :mod:`.engine_glue`).
        Starts that sync, and has the engine woken after it."""
        if not self._backout_due():
            return False
        self._engine_waits = self._backed_out = True
        self._kick()
        return True

    def _backout_due(self) -> bool:
        return not self._closing and self._engine_would_wait() and self.has_work_for_this_worker()

    def _buffered_fps(self) -> list[str]:
        """Fingerprints of the leases the buffer holds (requests kept in memory included)."""
        return [
            x.fingerprint if isinstance(x, Leased) else x.meta.get(meta.FINGERPRINT, "")
            for x in self.buffer
            if isinstance(x, Leased) or x.meta.get(meta.FINGERPRINT) in self._held_tokens
        ]

    def enqueue_request(self, request: Request) -> bool:
        fp, update = self._fingerprint(request)
        attempt = _int(request.meta.get(meta.ATTEMPT), 1)
        not_before = _float(request.meta.get(meta.NOT_BEFORE), 0.0)
        last = request.meta.get(meta.LAST_FAILURE)
        last_failure = (str(last[0]), str(last[1])) if isinstance(last, list | tuple) and len(last) == 2 else None
        try:
            data = codec.encode(request, self.spider, self.rules)
        except codec.CodecError as e:
            self._keep_in_memory(request, fp, update, e)
            return True
        is_start = bool(request.meta.get("is_start_request"))
        reopen = (request.dont_filter or not self.compat.dedup) and not is_start and not update
        nr = NewRequest(
            fingerprint=fp,
            data=data,
            domain=domain_of(request.url),
            priority=request.priority,
            not_before=not_before,
            attempts=max(0, attempt - 1),
            last_failure=last_failure,
            update=update,
            reopen=reopen,
            # fetched again even while the record is pending or leased: then under a key of its own
            again=again_key(fp) if reopen else "",
        )
        if update:
            self.inflight.pop(fp, None)  # its lease is void; the record will be leased anew
        eligible = not_before <= time.time()
        if not eligible:
            self._inc("delayed")
            self._sync_at(not_before)
        self.outbox.append(("enq", nr), request.priority if eligible else None)
        if len(self.outbox) >= OUTBOX_CAP * self.batch or (
            # the engine backs out with nothing buffered and reads start() without coming
            # back to the reactor (so no sync ends): write and lease a batch now, or the
            # first download would wait for OUTBOX_CAP batches of start requests
            self._backed_out and not self.buffer and len(self.outbox) >= self.batch
        ):
            self._flush_now()
        elif len(self.outbox) >= self.batch:
            self._kick()
        return True

    def _keep_in_memory(self, request: Request, fp: str, update: bool, e: codec.CodecError) -> None:
        """A request the store cannot hold (a value that is not data, or one a record may
        not name): served from memory, deduplicated through a record leased to this worker
        from the start (no request in it), acked as usual; not resumed after a stop."""
        kind = e.type_name if isinstance(e, codec.NotStorable) else "refused"
        self._inc("unserializable")
        self._inc(f"unserializable/{kind}")
        self.scrapy_stats.unserializable()
        if isinstance(e, codec.SchemeRefused):
            if not self._warned_scheme:
                self._warned_scheme = True
                logger.warning(
                    "frontier: %s has a URL scheme the frontier does not store (%s); such requests are "
                    "kept in memory only: deduplicated like the others, but a crash or a stop loses those "
                    "not finished (they are dead-lettered). Add the scheme to SCALE_FRONTIER_SCHEMES to "
                    "store them. Counted in scale/frontier/unserializable/refused",
                    redact_text(str(request)[:200]),
                    redact_text(str(e)),
                )
        elif not self._warned_unserializable:
            self._warned_unserializable = True
            logger.warning(
                "frontier: %s holds a value the frontier cannot store (%s); such requests are kept in "
                "memory only: deduplicated like the others, but a crash or a stop loses those not "
                "finished (they are dead-lettered). Put plain data in meta/cb_kwargs (str, numbers, lists, "
                "dicts, bytes, tuples, sets, dates, Decimal, or an Item/dataclass/attrs instance of the "
                "project). Counted by type in scale/frontier/unserializable/*",
                redact_text(str(request)),
                redact_text(str(e)),
            )
        if update:  # a retry/redirect of a request this worker holds: its lease goes on
            prior = self.inflight.pop(fp, None)
            if prior is not None:
                self._held_tokens[fp] = prior.token
        elif not request.dont_filter:  # dont_filter bypasses dedup (as Scrapy's): no record
            nr = NewRequest(
                fingerprint=fp,
                data=codec.memory_marker(kind),
                domain=domain_of(request.url),
                priority=request.priority,
                held_by=self.worker,
                held_seconds=self.lease_seconds,
            )
            self._held_waiting[id(nr)] = request
            self.outbox.append(("enq", nr))
            return
        self._push_memory(request)

    def _push_memory(self, request: Request) -> None:
        self.buffer.push(request.priority, request)
        self._mem_n += 1
        self.scrapy_stats.enqueued("memory")

    def _held_written(self, ops: list[tuple[str, Any]], results: list[EnqueueResult]) -> None:
        """The store answered the dedup of requests kept in memory: serve the new ones."""
        if not self._held_waiting:
            return
        enqueued = [nr for kind, nr in ops if kind == "enq"]
        for nr, result in zip(enqueued, results, strict=False):
            request = self._held_waiting.pop(id(nr), None) if nr.held_by else None
            if request is not None and result is EnqueueResult.ADDED:
                self._held_tokens[nr.fingerprint] = 0
                self._push_memory(request)

    def _flush_now(self) -> None:
        """Write the outbox on the reactor thread, waiting for a running sync.

        Backpressure for a burst the reactor does not come back from (Scrapy
        consumes ``start()`` without yielding while the downloader is full): the
        outbox must stay bounded. Order holds: a running sync only has older ops,
        and it finishes (the lock) before these are written."""
        if self._trouble.since is not None or self._fatal is not None:
            return  # failing writes: they wait for the backoff (a burst while the disk is full)
        ops = self.outbox.take()
        res = SyncResult()
        # an engine that waits for work (engine_backs_out) goes on reading start() without
        # coming back to the reactor: lease here too, or it would read all of start() first
        lease = 0 if self.buffer else self.batch
        try:
            with self._store_lock, self.store.batch():
                self._write_ops(ops.ops, res)
                if lease:
                    res.leased = self.store.lease(self.worker, lease, self.lease_seconds)
                res.counts = self.store.counts()
        except Exception as e:  # noqa: BLE001 - keep the writes, in order; the syncs retry them
            self.outbox.put_back(ops)
            self._sync_trouble(e)
            return
        self._pending_top = max_opt(self._pending_top, ops.top)
        self._inc("outbox_flushes")
        self._count_writes(res)
        self._held_written(ops.ops, res.enqueued)
        self.scrapy_stats.written(ops.ops, res.enqueued)
        self._take_leased(res.leased)
        self._apply_counts(res)

    def next_request(self) -> Request | None:
        request = None
        while request is None:
            if self._engine_would_wait():
                # nothing buffered, or a request of higher priority than everything buffered
                # waits to be written and leased: the engine waits for that sync
                self._engine_waits = True
                self._kick()
                return None
            lz = self._next_buffered()
            if lz is None:  # every buffered request's site is held by the pacer (it wakes the engine)
                return None
            if isinstance(lz, Request):  # kept in memory only
                self._mem_n -= 1
                self.scrapy_stats.dequeued("memory")
                self._paced(lz, None)
                fp = lz.meta.get(meta.FINGERPRINT)
                if fp in self._held_tokens:  # its record is leased to this worker: acked as usual
                    self.inflight[fp] = InFlight(self._held_tokens.pop(fp), lz.url, 0, lz)
                return lz
            if lz.error is not None:  # the store already moved it to the dead letters
                logger.warning("frontier: record %s cannot be read, dead-lettered: %s", lz.fingerprint, lz.error)
                self._inc("dead_lettered")
                continue
            try:
                request = codec.decode(lz.data, self.spider, self.rules)
            except codec.CodecError as e:
                logger.warning("frontier: record %s cannot be read, dead-lettered: %s", lz.fingerprint, e)
                self.outbox.append(("dead", (lz.fingerprint, str(e))))
                self._inc("dead_lettered")
                continue
            request.meta[meta.FINGERPRINT] = lz.fingerprint
            self.inflight[lz.fingerprint] = InFlight(lz.token, request.url, lz.attempts, request)
            self.scrapy_stats.dequeued("disk")
            self._paced(request, lz)
        if self._ready() <= self.batch // 2:
            self._kick()
        return request

    # ---- pacing (scrapy_scale.frontier.pacing; the pacer is the throttle) ------------------------

    def _next_buffered(self) -> Leased | Request | None:
        """The next buffered entry to hand out: the best one, or with a pacer the best
        whose site is due; leased requests of a site due much later go back to the
        store, delayed until their turn, so they do not fill the buffer."""
        if self._pacer is None and self._slot_full is None:
            return self.buffer.pop()
        pick = pacing.take_due(self.buffer, self._pacer, time.time(), self._slot_full)
        self._held = pick.held
        for lz, turn in pick.defer:
            nr = NewRequest(
                fingerprint=lz.fingerprint,
                data=lz.data,
                domain=lz.domain,
                priority=lz.priority,
                not_before=turn,
                attempts=lz.attempts,
                last_failure=lz.last_failure,
                update=True,
            )
            self.scrapy_stats.deferral(nr)  # the same request waiting for its turn: not enqueued again
            self.outbox.append(("enq", nr))
            self._inc("deferred")
            self._sync_at(turn)
        return pick.due

    def _sync_at(self, when: float) -> None:
        """Sync (and so lease) the moment a delayed request of ours becomes eligible, not
        up to a tick later: a held retry goes out at its time."""
        if self._closing or when >= self._due_at - 0.005:
            return
        from twisted.internet import reactor

        if self._due_timer is not None and self._due_timer.active():
            self._due_timer.cancel()
        self._due_at = when
        self._due_timer = reactor.callLater(max(0.0, when - time.time()) + 0.005, self._due)  # type: ignore[arg-type]

    def _due(self) -> None:
        self._due_timer, self._due_at = None, math.inf
        if self._sync_running is not None:  # the running sync may have read the store too early
            self._sync_at(time.time() + 0.02)
            return
        self._kick()

    def _paced(self, request: Request, lz: Leased | None) -> None:
        if self._pacer is not None:
            domain = lz.domain if lz is not None else pacing.entry_domain(request)
            self._pacer.handed_out(request, domain, lz.fingerprint if lz is not None else None)

    def _engine_would_wait(self) -> bool:
        """Nothing buffered, or a request of higher priority than everything buffered
        waits to be written and leased: ``next_request`` answers None until a sync."""
        return not self.buffer or holds_back(self._waiting_top(), self.buffer.top_priority())

    def _ready(self) -> int:
        """Buffered leased requests the pacer did not hold at its last look."""
        return max(0, len(self.buffer) - self._mem_n - self._held)

    def _waiting_top(self) -> int | None:
        """The highest eligible priority written to the store by no lease of ours yet."""
        top = max_opt(self.outbox.top, self._pending_top)
        return max_opt(top, self._sync_ops.top) if self._sync_ops is not None else top

    # ---- fingerprints, continuations ----------------------------------------------------------

    def _fingerprint(self, request: Request) -> tuple[str, bool]:
        """The record key of ``request``, and whether it continues a known record:
        a retry (same fingerprint, ``dont_filter`` as every retry has, and attempt > 1
        or in flight here) or a redirect of a request in flight here. Anything else
        -- e.g. a request that copied ``response.meta`` -- is deduplicated as usual."""
        real = self.fingerprinter.fingerprint(request).hex()
        given = request.meta.get(meta.FINGERPRINT)
        attempt = _int(request.meta.get(meta.ATTEMPT), 1)
        fp, update = real, False
        if given and key_base(given) == real:  # its own record, or a dont_filter one of its own
            update = request.dont_filter and (attempt > 1 or given in self.inflight)
            fp = given if update else real
        elif given and given in self.inflight:
            redirects = request.meta.get("redirect_urls") or []
            if redirects and redirects[-1] == self.inflight[given].url:
                fp, update = given, True
        if given and fp != given:
            # it copied another request's meta (response.meta): a chain of its own, from attempt 1
            for key in meta.CHAIN_KEYS:
                request.meta.pop(key, None)
        request.meta[meta.FINGERPRINT] = fp
        return fp, update

    # ---- acks ------------------------------------------------------------------------------------

    def _on_outcome(
        self, outcome: Outcome, request: Request | None = None, spider: Spider | None = None, **kw: Any
    ) -> None:
        if not outcome.final:
            return
        entry = self.inflight.get(outcome.fingerprint)
        if entry is None:
            return
        if outcome.done:
            entry.items_expected = outcome.items
            self._maybe_ack(outcome.fingerprint, entry)
        else:
            self._settle(
                outcome.fingerprint,
                entry,
                ("fail", (outcome.fingerprint, entry.token, str(outcome.cls), outcome.reason)),
            )

    def _on_item(self, item: Any = None, response: Any = None, spider: Any = None, **kw: Any) -> None:
        req = getattr(response, "request", None)
        fp = req.meta.get(meta.FINGERPRINT) if req is not None else None
        entry = self.inflight.get(fp) if fp else None
        if entry is not None:
            failure = kw.get("failure")
            error = getattr(failure, "value", None) if failure is not None else kw.get("exception")
            if isinstance(error, ItemNotStored):
                entry.unstored = True  # kept leased, released at close: fetched again on resume
                return
            if isinstance(error, ItemDeadLettered) and entry.item_failure is None:
                entry.item_failure = f"{error.label}: {error.reason or error}"[:500]
            entry.items_seen += 1
            self._maybe_ack(fp, entry)  # type: ignore[arg-type]

    def _on_response(self, response: Any = None, request: Request | None = None, **kw: Any) -> None:
        fp = request.meta.get(meta.FINGERPRINT) if request is not None else None
        entry = self.inflight.get(fp) if fp else None
        if entry is not None:
            entry.responded = True

    def _maybe_ack(self, fp: str, entry: InFlight) -> None:
        if entry.items_expected is not None and entry.items_seen >= entry.items_expected:
            self._settle(fp, entry, self._done_op(fp, entry))

    @staticmethod
    def _done_op(fp: str, entry: InFlight) -> tuple[str, Any]:
        """The ack of a request the engine is done with; a fail when one of its items
        went to the dead letter (its output is not all stored)."""
        if entry.item_failure is not None:
            return ("fail", (fp, entry.token, "parse_failed", entry.item_failure))
        return ("ack", (fp, entry.token))

    # -- crash-test fix (commands/crash-test helper): Scrapy's scraper drains a callback's
    # output into a queue and enqueues the requests in it afterwards, so the final outcome
    # (sent when the output iterator ends) can come BEFORE the children reach
    # enqueue_request. Acking then put the parent's ack ahead of its children in the
    # outbox, and a kill -9 between two syncs lost the children for good (seen in
    # tests/test_frontier_crash.py). The engine holds the request in its in-progress set
    # until the scraper has processed all of that output, so the ack/fail waits for that.
    def _settle(self, fp: str, entry: InFlight, op: tuple[str, Any]) -> None:
        """Write ``op`` (the ack or fail of ``fp``) now, or once the engine lets go of it."""
        if entry.unstored and op[0] == "ack":
            return
        if self._engine_holds(entry.request):
            entry.settled = op  # written by _ack_finished_by_engine on a later tick
            return
        del self.inflight[fp]
        self.outbox.append(op)

    def _engine_holds(self, request: Request | None) -> bool:
        inprogress = compat.engine_requests_in_progress(self.crawler)
        return bool(request is not None and inprogress is not None and request in inprogress)

    def _ack_finished_by_engine(self, closing: bool = False) -> None:
        """A request the engine is done with but no final outcome covered (every request
        without the outcome middlewares; after OUTCOME_GRACE with them) gets the outcome
        package's documented fallback outcome, sent on the bus like any other: this
        scheduler then acks or fails it in ``_on_outcome``, and every subscriber sees it.
        The frontier never decides a class of its own.

        ``closing`` (a clean stop, or the reactor stopping): write every settled
        ack/fail the engine let go of (they used to wait for the next tick and
        were released at close instead, so the resumed crawl fetched them again),
        and ack what plain Scrapy finished with a response; the rest stays held
        and is released (fetched again on resume)."""
        found = compat.engine_requests_in_progress(self.crawler)
        if found is None and not closing:
            return
        inprogress: set[Any] = found if found is not None else set()
        now = time.monotonic()
        for fp, entry in list(self.inflight.items()):
            if entry.request is None or entry.request in inprogress or entry.unstored:
                continue
            if entry.settled is not None:
                self._settle(fp, entry, entry.settled)
                continue
            if closing and (self.signal_mode or not entry.responded):
                continue
            if entry.left_at is None:
                entry.left_at = now
            if self.signal_mode and now - entry.left_at < OUTCOME_GRACE:
                continue
            if self.signal_mode:
                self._inc("acked_without_outcome")
            send_fallback(self.crawler, entry.request, entry.responded, items=entry.items_seen)
            if fp in self.inflight and self.inflight[fp] is entry:  # no receiver settled it
                del self.inflight[fp]
                self.outbox.append(
                    ("ack", (fp, entry.token))
                    if entry.responded
                    else ("fail", (fp, entry.token, "fatal", "no response"))
                )

    # ---- idle / drain ------------------------------------------------------------------------------

    def _on_idle(self, spider: Spider | None = None) -> None:
        if self.wait_for_seeds:
            raise DontCloseSpider
        if self._finished:
            return
        # nothing buffered, in flight or left anywhere (as of the last sync): end the run
        self._finish_requested = True
        self._kick()
        raise DontCloseSpider

    # ---- sync ----------------------------------------------------------------------------------------

    def _tick(self) -> None:
        self._ack_finished_by_engine()
        self._kick()

    def sync_blocking(self) -> SyncResult:
        """One sync in the calling thread (tests, tools): same as a tick's."""
        args = self._sync_args()
        res = self._sync_work(*args)
        self._sync_done(res)
        return res

    def _kick(self) -> None:
        if self._sync_running is not None or self._closing or self._pool is None or self._fatal is not None:
            return
        if not self._trouble.may_sync(time.monotonic()):
            return  # backing off after failed syncs
        args = self._sync_args()
        d = self._in_thread(lambda: self._sync_work(*args))
        self._sync_running = d
        d.addCallbacks(self._sync_done, self._sync_failed)

    def _sync_args(self) -> tuple[list[tuple[str, Any]], int, list[str] | None, bool, bool, int]:
        taken = self.outbox.take()
        ops = taken.ops
        self._sync_ops = taken
        btop = self.buffer.top_priority()
        # enqueues that outrank the whole buffer: lease them now even with a full buffer
        wall = time.time()
        higher = sum(
            1 for kind, nr in ops if kind == "enq" and nr.not_before <= wall and (btop is None or nr.priority > btop)
        )
        if holds_back(self._pending_top, btop):
            higher = self.batch
        want = lease_wanted(self._ready(), self.batch, higher)
        # requests held by the pacer do not count, but the buffer stays bounded, except for
        # the ones that outrank it all: the engine waits for them (next_request holds back),
        # so a buffer the pacer filled must not keep them out
        want = max(0, min(want, HELD_CAP * self.batch - len(self.buffer)), min(self.batch, higher))
        self._sync_leases = want > 0
        now = time.monotonic()
        renew: list[str] | None = None
        if now - self._last_renew >= self.lease_seconds / 3:
            renew = self._buffered_fps() + list(self.inflight)
            self._last_renew = now
        reclaim = now - self._last_reclaim >= min(5.0, self.lease_seconds / 4)
        if reclaim:
            self._last_reclaim = now
        finish = self._finish_requested and not ops and not self.buffer and not self.inflight
        if finish:
            self._finish_requested = False
        feed = max(self.batch, FEED_PULL) if self.store.feed_key else 0
        return ops, want, renew, reclaim, finish, feed

    def _in_thread(self, fn: Callable[[], Any]) -> defer.Deferred[Any]:
        from twisted.internet import reactor  # the one Scrapy installed

        assert self._pool is not None
        return threads.deferToThreadPool(reactor, self._pool, fn)  # type: ignore[arg-type]

    def _write_ops(self, ops: list[tuple[str, Any]], res: SyncResult) -> None:
        """Write ``ops`` in order, consecutive ops of one kind as one call."""
        i = 0
        while i < len(ops):
            kind = ops[i][0]
            j = i
            while j < len(ops) and ops[j][0] == kind:
                j += 1
            group = [op[1] for op in ops[i:j]]
            if kind == "enq":
                res.enqueued += self.store.enqueue(group)
            elif kind == "ack":
                n = self.store.ack(self.worker, group)
                res.acked += n
                res.stale += len(group) - n
            elif kind == "fail":
                n = self.store.fail(self.worker, group)
                res.failed += n
                res.stale += len(group) - n
            elif kind == "dead":
                for fp, reason in group:
                    self.store.dead_letter(fp, reason)
                    res.dead += 1
            i = j

    def _sync_work(
        self, ops: list[tuple[str, Any]], want: int, renew: list[str] | None, reclaim: bool, finish: bool, feed: int
    ) -> SyncResult:
        """Runs in the store thread: one round of writes, lease upkeep, and the next batch."""
        res = SyncResult()
        t0 = time.monotonic()
        with self._store_lock, self.store.batch():
            self._write_ops(ops, res)
            if feed:
                self._pull_feed(feed, res)
            if renew:
                self.store.renew(self.worker, self.lease_seconds, renew)
            if reclaim:
                res.reclaimed = self.store.reclaim()
            if time.monotonic() - self._last_beat >= self._beat_window / 4:
                self._beat()
            if want > 0:
                res.leased = self.store.lease(self.worker, want, self.lease_seconds)
            res.counts = self.store.counts()
        if finish and not res.leased:
            c = res.counts
            if not (c["pending"] or c["delayed"] or c["leased"]):
                with self._store_lock:
                    res.finished_run = self.store.finish_run() is not None
        res.seconds = time.monotonic() - t0
        return res

    def _beat(self) -> None:
        """Tell the store this worker is alive for the next heartbeat window (status
        shows live workers, and a run without any as interrupted)."""
        self._last_beat = time.monotonic()
        self.store.heartbeat(self.worker, self.store.clock() + self._beat_window)

    def _pull_feed(self, n: int, res: SyncResult) -> None:
        """Take up to ``n`` feed messages and enqueue them, in order: runs of plain URL
        seeds through the fast path (:class:`UrlSeeds`: the records the codec would make),
        the others as requests (:func:`codec.request_from_feed`). The messages stay in this
        worker's taken list until they are written (then ``feed_done``): a sync that
        fails here takes the same ones again next time (duplicates are deduplicated)."""
        msgs = self.store.take_feed(self.worker, n)
        res.feed_full = len(msgs) >= n
        seeds = self._plain_seeds
        runs: list[tuple[bool, list[NewRequest]]] = []
        for msg in msgs:
            nr = seeds.from_feed(msg) if seeds is not None else None
            plain = nr is not None
            if nr is None:
                try:
                    r = codec.request_from_feed(msg, self.spider, self.rules)
                    fp = self._thread_fingerprinter().fingerprint(r).hex()
                    nr = codec.new_request(r, fingerprint=fp, spider=self.spider, rules=self.rules)
                except codec.CodecError as e:
                    logger.warning(
                        "frontier: feed message refused: %s (%.200r)", redact_text(str(e)), redact_text(str(msg))
                    )
                    res.feed_bad += 1
                    continue
            if not runs or runs[-1][0] != plain:
                runs.append((plain, []))
            runs[-1][1].append(nr)
        if runs:
            self.store.reopen_run()
        for plain, run in runs:
            if plain:
                added = self.store.enqueue_new(run)
                res.feed_added += added
                res.feed_known += len(run) - added
            else:
                res.enqueued += self.store.enqueue(run)
        if msgs:
            self.store.feed_done(self.worker)

    @functools.cached_property
    def _plain_seeds(self) -> UrlSeeds | None:
        """The fast path for plain URL feed messages, when the crawler fingerprints requests
        with Scrapy's default fingerprinter (another may not give the seed's fingerprint)."""
        from scrapy.utils.request import RequestFingerprinter

        return UrlSeeds(self.rules) if type(self.fingerprinter) is RequestFingerprinter else None

    def _thread_fingerprinter(self) -> Any:
        """A fingerprinter of the crawler's class for the store thread (its cache
        is not shared with the reactor thread's)."""
        if self._feed_fp is None:
            try:
                self._feed_fp = build_from_crawler(type(self.fingerprinter), self.crawler)
            except Exception:  # noqa: BLE001 - a custom class that cannot be built twice
                self._feed_fp = self.fingerprinter
        return self._feed_fp

    def _sync_done(self, res: SyncResult) -> None:
        self._sync_running = None
        written, self._sync_ops = self._sync_ops, None
        recovered = self._trouble.succeeded(time.monotonic())
        if recovered:
            logger.warning("%s", recovered)
        self._inc("syncs")
        self._sync_seconds += res.seconds
        self.stats.set_value("scale/frontier/sync_seconds", round(self._sync_seconds, 3))
        self._count_writes(res)
        if written is not None:
            self._held_written(written.ops, res.enqueued)
        self.scrapy_stats.written(written.ops if written is not None else [], res.enqueued, res.feed_added)
        self._inc("reclaimed", res.reclaimed)
        self._inc("feed_refused", res.feed_bad)
        self._inc("enqueued", res.feed_added)
        self._inc("deduplicated", res.feed_known)
        self._take_leased(res.leased)
        self._apply_counts(res)
        if res.finished_run and not self._finished:
            self._finished = True
            logger.info("frontier: job %r drained; run finished: %s", self.store.job, res.counts)
        # a sync that leased got the store's best; one that did not may have written
        # a priority above the buffer's best: the next sync leases it
        carried = None if self._sync_leases else max_opt(self._pending_top, written.top if written else None)
        self._pending_top = carried if holds_back(carried, self.buffer.top_priority()) else None
        if self._closing:
            return
        if (
            res.leased
            or res.finished_run
            or (self._engine_waits and not self._engine_would_wait())
            or not self.has_pending_requests()
            # a backout that ended with nothing leased (a duplicate, another worker's lease):
            # the engine asks again now, not at its next heartbeat (a lazy start() waits
            # for the scheduler_empty that answer sends)
            or (self._backed_out and not self._backout_due())
        ):
            self._backed_out = False
            # new work, or maybe idle (or no longer held back) now: let the engine look at once.
            # Not after a sync that changed nothing the engine waits for: it would ask again at
            # once, kick another sync, and so on, as fast as the store answers, for as long as
            # every pending record is delayed (a sync of its own wakes it at the first one's time)
            self._engine_waits = False
            self._wake_engine()
        if self._ready() <= self.batch // 2 and (res.leased or self.outbox.enqueues):
            # more to lease, or new requests (children) that arrived during this sync and
            # are leasable as soon as they are written: do not let them wait for the tick
            # (the engine may have asked, got None and now waits for a wake-up)
            self._kick()
        elif (
            res.feed_full
            or len(self.outbox) >= self.batch
            or holds_back(self._waiting_top(), self.buffer.top_priority())
        ):
            self._kick()

    def _take_leased(self, leased: list[Leased]) -> None:
        """Buffer what a sync (or a flush) leased, and count the wait."""
        if not leased:
            return
        now = time.time()
        for lz in leased:
            if lz.error is not None:
                continue
            self._wait_sum += max(0.0, now - lz.eligible_at)
            self._wait_n += 1
        self._inc("leased", len(leased))
        for lz in leased:
            self.buffer.push(lz.priority, lz)
        if self._wait_n:
            self.stats.set_value("scale/frontier/wait_seconds_avg", round(self._wait_sum / self._wait_n, 3))

    def _count_writes(self, res: SyncResult) -> None:
        """Stats of what the store took: enqueues, and acks/failures as the store counted
        them (a refused one, whose lease token had passed to another worker, is stale)."""
        self._count_enqueued(res.enqueued)
        self._inc("acked", res.acked)
        self._inc("failed", res.failed)
        self._inc("stale_acks", res.stale)

    def _count_enqueued(self, results: list[EnqueueResult]) -> None:
        for r in results:
            if r in (EnqueueResult.ADDED, EnqueueResult.REOPENED):
                self._inc("enqueued")
            elif r is EnqueueResult.UPDATED:
                self._inc("updated")
            else:
                self._inc("deduplicated")

    def _sync_failed(self, failure: Any) -> None:
        self._sync_running = None
        # keep the writes (in order, ahead of newer ones) and try again on the next tick
        if self._sync_ops is not None:
            self.outbox.put_back(self._sync_ops)
            self._sync_ops = None
        self._sync_trouble(failure.value)

    def _sync_trouble(self, error: BaseException) -> None:
        """A sync failed: stop the crawl for an error that cannot pass (the store says so),
        else back off, log at a bounded rate, and stop past SCALE_FRONTIER_ERROR_DEADLINE."""
        self._inc("sync_errors")
        fatal = self.store.fatal_error(error)
        if fatal is not None:
            self._stop_crawl(fatal)
            return
        line, give_up = self._trouble.failed(time.monotonic(), f"{type(error).__name__}: {error}")
        if give_up:
            self._stop_crawl(f"{line} (SCALE_FRONTIER_ERROR_DEADLINE)")
        elif line:
            logger.error("%s", line)

    def _stop_crawl(self, message: str) -> None:
        """The frontier cannot go on: say why, close the spider (frontier_failed), exit 1."""
        if self._fatal is not None:
            return
        self._fatal = message
        logger.error("frontier: the crawl cannot go on, stopping it: %s", message)
        self.stats.set_value("scale/frontier/error", message[:500])
        exitcode.request(1, f"the frontier stopped the crawl: {message[:200]}", self.crawler)
        engine = compat.engine_of(self.crawler)
        if engine is not None and getattr(engine, "spider", None) is not None:
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(engine.close_spider_async(reason="frontier_failed"))

    def _apply_counts(self, res: SyncResult) -> None:
        if not res.counts:
            return
        self.remote = res.counts
        for k, v in res.counts.items():
            self.stats.set_value(f"scale/frontier/state/{k}", v)
        self.stats.set_value("scale/frontier/queue_length", res.counts["pending"] + res.counts["delayed"])

    def _wake_engine(self) -> None:
        compat.wake_engine(self.crawler)

    def _inc(self, key: str, n: int = 1) -> None:
        if n:
            self.stats.inc_value(f"scale/frontier/{key}", n)


def _reactor() -> Any:
    from twisted.internet import reactor  # the one Scrapy installed

    return reactor


def _int(v: Any, default: int) -> int:
    try:
        return int(v) if v is not None else default
    except (TypeError, ValueError):
        return default


def _float(v: Any, default: float) -> float:
    try:
        return float(v) if v is not None else default
    except (TypeError, ValueError):
        return default
