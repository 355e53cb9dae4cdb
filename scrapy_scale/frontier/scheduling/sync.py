"""The store sync: the one store thread, the lock, and a round of store work.

The reactor never waits for the store. A round takes one :class:`SyncPlan` (the ordered
writes, how many records to lease, which leases to renew, whether to reclaim expired
leases, finish the run, or pull feed messages) and gives one :class:`SyncResult`. It
writes the ops in order (one SQLite transaction; Redis scripts in order), pulls the feed,
keeps this worker's heartbeat, renews and reclaims leases and leases the next batch.
Failed rounds back off, are logged at a bounded rate and stop the crawl past
``SCALE_FRONTIER_ERROR_DEADLINE`` (:class:`.trouble.SyncTrouble`). This module knows the
store and nothing else of the scheduler: what a round brings back is handed to the
callables given to :meth:`StoreSync.start`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer, threads
from twisted.python.threadpool import ThreadPool

from scrapy_scale.daemon_pool import DaemonThreadPool
from scrapy_scale.frontier.scheduling.fair_share import FairShare
from scrapy_scale.frontier.scheduling.feed import FeedReader
from scrapy_scale.frontier.scheduling.trouble import SyncTrouble
from scrapy_scale.frontier.store import EnqueueResult, FrontierStore, Leased, StoreWaiting

logger = logging.getLogger(__name__)

#: a worker's heartbeat holds for its lease, at most this many seconds (then status says
#: the worker is gone); it beats four times per such window
HEARTBEAT_WINDOW = 30.0
#: seconds a flush on the reactor thread waits for a running round (which takes
#: milliseconds, unless it waits for an unreachable store)
FLUSH_WAIT = 1.0

Ops = list[tuple[str, Any]]


@dataclass
class SyncPlan:
    """One round of store work, in this order."""

    #: writes in order: ("enq", NewRequest), ("ack", (fp, token)), ("fail", ...), ("dead", ...)
    ops: Ops = field(default_factory=list)
    #: records to lease (0: none), at most this worker's share when others are alive
    want: int = 0
    #: records leased to this worker now (buffered or in flight): its share counts them
    held: int = 0
    #: fingerprints whose leases to renew (None: not this round)
    renew: list[str] | None = None
    #: give expired leases (any worker's) back to pending
    reclaim: bool = False
    #: finish the run if nothing is pending, delayed or leased anywhere (and nothing was leased)
    finish: bool = False
    #: feed messages to pull at most (0: none)
    feed: int = 0


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
    #: leases given back (at close)
    released: int = 0


class StoreSync:
    def __init__(self, store: FrontierStore, *, lease_seconds: float, error_deadline: float, floor: int = 1):
        self.store = store
        self.lease_seconds = lease_seconds
        self.worker = ""
        #: turns feed messages into records (set at attach; None: no feed)
        self.feed: FeedReader | None = None
        #: held while the store is in use (the store thread, or a flush on the reactor thread)
        self.lock = threading.Lock()
        #: the running round (None: none), and when it started (monotonic)
        self.running: defer.Deferred[Any] | None = None
        self._round_started = 0.0
        #: why the store cannot be used any more (it said so, or the deadline passed), else None
        self.fatal: str | None = None
        #: backoff, bounded logging and the deadline of failing rounds
        self.trouble = SyncTrouble(error_deadline)
        #: this worker's share of the job's leases among the live workers (``floor``: its concurrency)
        self.fair = FairShare(floor=floor, clock=store.clock)
        self._pool: ThreadPool | None = None
        self._beat_window = min(lease_seconds, HEARTBEAT_WINDOW)
        self._last_beat = 0.0
        self._last_renew = time.monotonic()
        self._last_reclaim = 0.0
        #: the counts fair_want read in this round (None: it read none)
        self._fair_counts: dict[str, int] | None = None

    # ---- the thread ----------------------------------------------------------------------

    def start_thread(self) -> None:
        """The store thread: a daemon, so it never keeps the process alive once the reactor
        stopped (a second Ctrl-C stops the reactor without closing the spider; a non-daemon
        thread then blocked the interpreter's exit forever)."""
        self._pool = DaemonThreadPool(1, 1, name="scale-frontier")
        self._pool.start()

    def stop_thread(self) -> None:
        if self._pool is not None:
            self._pool.stop()

    @property
    def started(self) -> bool:
        return self._pool is not None

    def in_thread(self, fn: Callable[[], Any]) -> defer.Deferred[Any]:
        from twisted.internet import reactor  # the one Scrapy installed

        assert self._pool is not None
        return threads.deferToThreadPool(reactor, self._pool, fn)  # type: ignore[arg-type]

    # ---- planning ------------------------------------------------------------------------

    def may_start(self) -> bool:
        """May a round start now? Not while one runs, before the thread, after a fatal
        error, or while backing off after failed rounds."""
        if self.running is not None or self._pool is None or self.fatal is not None:
            return False
        return self.trouble.may_sync(time.monotonic())

    def give_up(self, why: str) -> bool:
        """No more rounds: the store cannot be trusted with more writes. False: given up already."""
        if self.fatal is not None:
            return False
        self.fatal = why
        return True

    @property
    def failing(self) -> bool:
        """Rounds are failing (backing off), or the store cannot be used any more."""
        return self.trouble.since is not None or self.fatal is not None

    def renew_due(self) -> bool:
        """Is it time to renew this worker's leases (a third of a lease since the last)?"""
        now = time.monotonic()
        if now - self._last_renew >= self.lease_seconds / 3:
            self._last_renew = now
            return True
        return False

    def reclaim_due(self) -> bool:
        now = time.monotonic()
        if now - self._last_reclaim >= min(5.0, self.lease_seconds / 4):
            self._last_reclaim = now
            return True
        return False

    # ---- rounds --------------------------------------------------------------------------

    def start(
        self, plan: SyncPlan, done: Callable[[SyncResult], None], failed: Callable[[BaseException], None]
    ) -> None:
        """Run ``plan`` in the store thread; ``done`` or ``failed`` is called on the reactor
        thread once it ends (``running`` is None again by then)."""
        d = self.in_thread(lambda: self.run(plan))
        self.running = d
        self._round_started = time.monotonic()

        def ok(res: SyncResult) -> None:
            self.running = None
            done(res)

        def err(f: Any) -> None:
            self.running = None
            failed(f.value)

        d.addCallbacks(ok, err)

    def run(self, plan: SyncPlan) -> SyncResult:
        """One round of writes, lease upkeep, and the next batch (in the store thread, or
        in the calling thread for tests and tools)."""
        res = SyncResult()
        t0 = time.monotonic()
        with self.lock, self.store.batch():
            self.write_ops(plan.ops, res)
            if plan.feed and self.feed is not None:
                pull = self.feed.pull(self.store, self.worker, plan.feed)
                res.enqueued += pull.enqueued
                res.feed_bad, res.feed_added, res.feed_known, res.feed_full = (
                    pull.bad,
                    pull.added,
                    pull.known,
                    pull.full,
                )
            if plan.renew:
                self.store.renew(self.worker, self.lease_seconds, plan.renew)
            if plan.reclaim:
                res.reclaimed = self.store.reclaim()
            if time.monotonic() - self._last_beat >= self._beat_window / 4:
                self.beat()
            want = self.fair_want(plan.want, plan.held)
            if want > 0:
                res.leased = self.store.lease(self.worker, want, self.lease_seconds)
            res.counts = self.counts_after(res.leased)
        if plan.finish and not res.leased:
            c = res.counts
            if not (c["pending"] or c["delayed"] or c["leased"]):
                with self.lock:
                    res.finished_run = self.store.finish_run() is not None
        res.seconds = time.monotonic() - t0
        return res

    def flush(self, ops: Ops, lease: int, held: int = 0) -> SyncResult:
        """Write ``ops`` and lease ``lease`` records now (at most this worker's share, it
        holds ``held``), in the calling (reactor) thread, after any running round (the
        lock). Raises what the store raised, and StoreWaiting rather than wait: for a
        round that holds the store past FLUSH_WAIT (it waits for its server), or for the
        store's server (Redis unreachable). A reactor that waited there stopped the crawl
        as long as Redis was down: no download, no log line."""
        # a round stuck past FLUSH_WAIT costs the first flush that wait, not every flush
        held_for = time.monotonic() - self._round_started if self.running is not None else 0.0
        if not self.lock.acquire(timeout=max(0.0, FLUSH_WAIT - held_for)):
            raise StoreWaiting(f"a frontier round has held the store for {held_for:.1f} s")
        try:
            res = SyncResult()
            with self.store.batch(), self.store.impatient():
                self.write_ops(ops, res)
                lease = self.fair_want(lease, held)
                if lease:
                    res.leased = self.store.lease(self.worker, lease, self.lease_seconds)
                res.counts = self.counts_after(res.leased)
            return res
        finally:
            self.lock.release()

    def final(self, ops: Ops, held: list[str], finish: bool) -> defer.Deferred[SyncResult]:
        """The last writes of a worker that closes: the ops, its leases given back, its
        heartbeat ended, the run finished if ``finish``; the counts and dead letters."""

        def work() -> SyncResult:
            res = SyncResult()
            with self.lock:
                self.write_ops(ops, res)
                res.released = self.store.release(self.worker, held) if held else 0
                self.store.heartbeat(self.worker, self.store.clock())  # this worker has stopped
                if finish:
                    res.finished_run = self.store.finish_run() is not None
                res.counts = self.store.counts()
                res.dead_letters = self.store.dead_letter_count()
            return res

        return self.in_thread(work)

    def last_writes(self, ops: Ops) -> defer.Deferred[None]:
        """The ops and this worker's end, when the reactor stops before the spider closed
        (leases stay: the restarted worker takes them back at once)."""

        def work() -> None:
            with self.lock:
                self.write_ops(ops, SyncResult())
                self.store.heartbeat(self.worker, self.store.clock())  # this worker has stopped

        return self.in_thread(work)

    def fair_want(self, want: int, held: int) -> int:
        """``want`` records, or fewer: this worker's share of the job among the live
        workers, read from the store after the writes (:mod:`.fair_share`). Alone, the
        store is asked only for the heartbeats, once a second."""
        self._fair_counts = None
        if want <= 0:
            return want
        fair = self.fair
        if fair.read_due():
            fair.worker = self.worker
            fair.count(self.store.beats())
        if fair.workers <= 1:
            return want
        c = self._fair_counts = self.store.counts()
        return fair.cap(want, pending=c["pending"], leased=c["leased"], held=held)

    def counts_after(self, leased: list[Leased]) -> dict[str, int]:
        """The job's counts after this round's lease: the ones :meth:`fair_want` read just
        before it (after the writes), the records this lease took moved from pending to
        leased, instead of a second read (on Redis a script call per partition, every
        round). Read again when there were none, or the lease dead-lettered a record it
        could not read. A record the lease promoted from delayed stays counted delayed
        until the next round's read: a snapshot a few milliseconds older, as any count
        is once read."""
        c, self._fair_counts = self._fair_counts, None
        if c is None or any(x.error for x in leased):
            return self.store.counts()
        took = len(leased)
        return {**c, "pending": max(0, c["pending"] - took), "leased": c["leased"] + took}

    def write_ops(self, ops: Ops, res: SyncResult) -> None:
        """Write ``ops`` in order (acks moved later, see :func:`acks_later`), consecutive
        ops of one kind as one call."""
        ops = acks_later(ops)
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

    def beat(self) -> None:
        """Tell the store this worker is alive for the next heartbeat window (status
        shows live workers, and a run without any as interrupted)."""
        self._last_beat = time.monotonic()
        self.store.heartbeat(self.worker, self.store.clock() + self._beat_window)

    # ---- trouble -------------------------------------------------------------------------

    def succeeded(self) -> None:
        recovered = self.trouble.succeeded(time.monotonic())
        if recovered:
            logger.warning("%s", recovered)

    def failed(self, error: BaseException) -> str | None:
        """A round (or a flush) failed: the reason the crawl must stop (an error that
        cannot pass, the store says so, or past SCALE_FRONTIER_ERROR_DEADLINE), else None
        (backing off; logged at a bounded rate)."""
        fatal = self.store.fatal_error(error)
        if fatal is not None:
            return fatal
        line, give_up = self.trouble.failed(time.monotonic(), f"{type(error).__name__}: {error}")
        if give_up:
            return f"{line} (SCALE_FRONTIER_ERROR_DEADLINE)"
        if line:
            logger.error("%s", line)
        return None


def acks_later(ops: Ops) -> Ops:
    """``ops`` with each ack moved after the enqueues that follow it, unless one of them
    names its record: a round's ``enq, enq, ..., ack, enq, ..., ack`` (each page's links,
    then its ack) is written as two store calls instead of two per page (on Redis each call
    costs about 40 us of server CPU beyond its records' work: benchmarks/bench_fleet.py).
    An ack still comes after everything that came before it (a page's links are stored
    before the page is done); an enqueue of the acked record itself (a page linking to an
    earlier page of the round, a retry, a ``dont_filter`` fetch) and any other op keep
    their place after it."""
    out: Ops = []
    acks: Ops = []
    acked: set[str] = set()
    for op in ops:
        kind, payload = op
        if kind == "ack":
            acks.append(op)
            acked.add(payload[0])
            continue
        if (
            kind == "enq"
            and acks
            and payload.fingerprint not in acked
            and not (payload.again and payload.again in acked)
        ):
            out.append(op)
            continue
        out += acks
        acks, acked = [], set()
        out.append(op)
    return out + acks
