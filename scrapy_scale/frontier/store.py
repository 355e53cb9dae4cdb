"""The frontier store: persisted request records of one job, and their states.

One interface, two backends (``sqlite:///path`` and ``redis://host:port/db``), chosen by
URL with :func:`scrapy_scale.frontier.backends.open_store`; one conformance suite
(tests/crawl/test_frontier_store.py) runs against both. A backend writes the twelve
abstract methods of :class:`FrontierStore` (docs/frontier.md, "The store contract");
every other method is shared code built on them.

Record lifecycle (one record per fingerprint per job)::

    pending --lease--> leased --ack--> done
       ^                 |   --fail--> failed(class, reason)
       |                 |   --enqueue(update=True)--> pending (next eligible time)
       +---reclaim/release+
    failed --requeue--> pending

Lease tokens: an ack, a fail, or an update that names one (``NewRequest.token``) is
refused once the record moved on from that lease (leased again, finished, failed), so a
worker frozen past its lease cannot finish, reopen or take back another worker's record.
"Pending" includes *delayed* records (next eligible time in the future), which cannot be
leased yet; :class:`Status` counts them apart.

Times are epoch seconds from the store's injectable ``clock`` (never the wall clock
itself). A store object is used by one thread at a time (the scheduler's store thread);
several processes may share one store (Redis; SQLite through its file lock). Requests are
stored as data, never pickle (:mod:`scrapy_scale.frontier.records.codec`). The records
and their states are in :mod:`scrapy_scale.frontier.records.model`, imported here for the
store's users.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from scrapy_scale import clock as clock_mod
from scrapy_scale.config.core_settings import job_name_problem
from scrapy_scale.frontier.records.model import (
    AGAIN_SEP,
    COUNT_KEYS,
    DELAYED_SAMPLE,
    DeadLetter,
    EnqueueResult,
    FrontierError,
    FrontierFatal,
    Leased,
    NewRequest,
    RunChange,
    RunInfo,
    Settle,
    Settled,
    State,
    Status,
    StoreWaiting,
    Summary,
    Want,
    WorkerTable,
    again_key,
    domain_of,
    key_base,
)
from scrapy_scale.frontier.records.workers_read import free_slot

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_scale.frontier.records.codec import RecordRules


class FrontierStore(abc.ABC):
    """The persisted frontier of ONE job (``self.job``).

    Every method is synchronous and may block on I/O; callers keep it off the
    reactor thread. Methods that take several records do them in one round trip /
    one transaction, in the order given (an enqueue listed before an ack is durable
    no later than the ack).

    A backend writes the abstract methods (the contract); the others are shared.
    """

    #: URL scheme(s) served by this backend
    schemes: tuple[str, ...] = ()

    def __init__(self, job: str, clock: clock_mod.Clock = clock_mod.wall):
        if not job:
            raise FrontierError("the job name is empty; set SCALE_JOB or give the spider a name")
        problem = job_name_problem(job)
        if problem:  # e.g. a spider name with glob characters, which SCAN would match against others
            raise FrontierError(f"{problem}; set SCALE_JOB to another name")
        self.job = job
        self.clock = clock

    # ==== the contract: what a backend writes ====================================

    @abc.abstractmethod
    def open(self) -> None:
        """Connect and create or check the layout. Raises :class:`FrontierError`
        (unreachable server, incompatible layout) with what to do about it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. Idempotent. Leases stay (use :meth:`release` first)."""

    @abc.abstractmethod
    def change_run(self, change: RunChange) -> RunInfo | None:
        """One atomic transition of the job's run record (workers starting together agree
        on one run). ``BEGIN``: join the current run if it has not ended (``resumed=True``),
        else delete every record, dead letter and heartbeat of the job and start a new run;
        returns the run. ``FINISH``: if the job is drained (no pending, delayed or leased
        record) end the run with its counts and return it (an ended run as it is), else
        None. ``REOPEN``: an ended run runs again (none: one starts). ``RESET``: delete every
        record, lease, dead letter, worker and feed message, end the run (counts
        ``{"reset": 1}``). The history stays."""

    @abc.abstractmethod
    def runs(self) -> list[RunInfo]:
        """Run history, oldest first."""

    @abc.abstractmethod
    def read_workers(self, table: WorkerTable) -> dict[str, Any]:
        """A workers table as stored, read back unchecked (the shared code checks it):
        ``PIDS``: worker id -> pid; ``BEATS``: worker id -> (last beat, alive until)."""

    @abc.abstractmethod
    def write_worker(self, table: WorkerTable, worker: str, value: float, seen: Any = None) -> bool:
        """``PIDS``: record pid ``value`` for ``worker`` if its stored pid is still
        ``seen`` (as :meth:`read_workers` gave it; None: none stored), atomically;
        False when another process changed it meanwhile. ``BEATS``: record that
        ``worker`` beat now and is alive until ``value``; True."""

    @abc.abstractmethod
    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        """Add requests, deduplicated by fingerprint; see :class:`NewRequest` for
        ``update`` / ``reopen``. A request with ``not_before`` in the future is
        delayed. Returns one result per request, in order. One request listed twice
        in a batch behaves as two calls in that order."""

    @abc.abstractmethod
    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        """Lease up to ``n`` eligible pending records to ``worker`` for ``seconds`` (due
        delayed records become pending first); [] when none. Order: highest priority first;
        within one, round-robin across domains, the least recently served first; inside a
        domain, a due delayed record, then ``tail=False`` newest first, then ``tail=True`` in
        arrival order (docs/frontier.md, "Order"). A lease gives a new token (``attempts``
        unchanged). A record whose fields cannot be read is dead-lettered alone and
        returned with :attr:`Leased.error` set; the others are leased."""

    @abc.abstractmethod
    def settle(self, worker: str | None, change: Settle, rows: Sequence[Settled] | None, seconds: float = 0.0) -> int:
        """Change the records ``rows`` (None: every lease of ``worker``, where the change
        allows it) as :class:`Settle` says; returns how many changed. ``rows`` is never
        empty (the shared callers return 0 first). Token rules (DONE, FAILED): a pair
        whose record no longer has that token (leased or updated since) or is no longer
        leased or pending is ignored, so a repeated ack is harmless. RELEASED, RENEWED:
        only ``worker``'s leases. RECLAIMED (``rows`` None): every expired lease plus
        every lease of ``worker`` (None: none), and a backend with a feed puts the
        messages taken by workers no longer alive back at the head of the feed."""

    @abc.abstractmethod
    def summary(self, want: Want, limit: int = 100) -> Summary:
        """Read the part of the job's summary ``want`` names (every value read back
        checked): ``COUNTS`` (records by state, :data:`COUNT_KEYS`; cheap),
        ``NEXT_ELIGIBLE`` (earliest not-before time of the delayed records, None when
        none), ``STATUS`` (:class:`Status`), ``DEAD_LETTERS`` (up to ``limit``, oldest
        first), ``DEAD_COUNT`` (cheap: no scan of the records)."""

    @abc.abstractmethod
    def get(self, fingerprint: str) -> dict[str, object] | None:
        """One record as a dict (keys: fingerprint, state, data, domain, priority,
        attempts, eligible_at, enqueued_at, last_failure, owner, lease_expires,
        token), or None. ``state`` is a :class:`State` value; a delayed record
        has state ``pending`` and ``eligible_at`` in the future."""

    @abc.abstractmethod
    def requeue_failed(self, cls: str | None) -> int:
        """Failed records of failure class ``cls`` (every class if None) become
        pending again, eligible now, behind the queue's others, attempts reset to 0,
        last failure kept. Returns how many (:meth:`requeue` reopens the run)."""

    # ==== optional: a backend may override ========================================

    def fatal_error(self, error: BaseException) -> str | None:
        """The message the crawl stops with when ``error`` (raised by a store call) means
        the frontier cannot go on (corrupt file, lost state); None: it may pass (retried)."""
        return str(error) if isinstance(error, FrontierFatal) else None

    def durability_warning(self) -> str | None:
        """Why the store may lose the job's state on a crash of its server, or None."""
        return None

    def batch(self) -> AbstractContextManager[object]:
        """``with store.batch():`` groups the calls inside (SQLite: one transaction)."""
        return nullcontext()

    def impatient(self) -> AbstractContextManager[object]:
        """``with store.impatient():`` a call inside that would wait for an unreachable
        server raises :class:`StoreWaiting` instead (the reactor thread must never wait on
        the network). Default: the backend has no such wait (SQLite's file is local)."""
        return nullcontext()

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        """:meth:`enqueue` for plain new requests (seeds: no update, reopen, holder, delay,
        attempts or failure; at the tail of their domain's queue whatever their ``tail``);
        returns how many were added."""
        return sum(1 for r in self.enqueue(requests) if r is EnqueueResult.ADDED)

    def take_feed(self, worker: str, n: int) -> list[str]:
        """Up to ``n`` raw JSON seed messages pushed by feeders (:attr:`feed_key`), moved
        atomically to ``worker``'s taken list until :meth:`feed_done` (while it holds some,
        they come again instead of new ones; :meth:`reclaim` gives those of a dead worker
        back to the feed). Backends without a feed return []."""
        return []

    def feed_done(self, worker: str) -> None:
        """``worker`` wrote the messages it took (:meth:`take_feed`): forget them."""
        return None

    @property
    def feed_key(self) -> str | None:
        """Where feeders push JSON seeds (Redis: a list key), or None."""
        return None

    def give_up_after(self, seconds: float) -> None:
        """Stop retrying an unreachable server after ``seconds`` (a reader, a command)."""
        return None

    def known_jobs(self) -> list[str]:
        """Names of the jobs that have had a run in this frontier ([]: it cannot tell)."""
        return []

    # ==== shared: built on the contract ============================================

    def __enter__(self) -> FrontierStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def begin_run(self) -> RunInfo:
        """Join the job's current run, or start a new one (:attr:`RunChange.BEGIN`)."""
        info = self.change_run(RunChange.BEGIN)
        if info is None:  # pragma: no cover - a backend that breaks the contract
            raise FrontierError(f"{type(self).__name__} began no run")
        return info

    def finish_run(self) -> RunInfo | None:
        """End the run if the job is drained (:attr:`RunChange.FINISH`). Idempotent."""
        return self.change_run(RunChange.FINISH)

    def reopen_run(self) -> None:
        """An ended run runs again (:attr:`RunChange.REOPEN`)."""
        self.change_run(RunChange.REOPEN)

    def reset(self) -> None:
        """Start over (:attr:`RunChange.RESET`); the run history stays."""
        self.change_run(RunChange.RESET)

    def claim_worker(self, prefix: str, pid: int, is_alive: Callable[[int], bool]) -> str:
        """Pick this process's worker id: ``f"{prefix}/{slot}"`` with the lowest slot whose
        recorded pid is absent or not alive (``is_alive(pid)`` False), and record ``pid``. A
        restarted worker gets its old id back (and its leases, :meth:`reclaim`), live
        siblings on the host keep theirs. Use a ``prefix`` unique per host."""
        while True:
            wid, seen = free_slot(prefix, self.read_workers(WorkerTable.PIDS), pid, is_alive)
            if self.write_worker(WorkerTable.PIDS, wid, pid, seen):
                return wid

    def heartbeat(self, worker: str, until: float) -> None:
        """Record that ``worker`` is alive now and until ``until`` unless it beats again
        (``until`` = now: it stopped). :meth:`status` reports them; a new run or a reset
        forgets them."""
        self.write_worker(WorkerTable.BEATS, worker, until)

    def beats(self) -> dict[str, tuple[Any, Any]]:
        """The current run's heartbeats as stored, unchecked (the caller checks them):
        worker id -> (last beat, alive until)."""
        return self.read_workers(WorkerTable.BEATS)

    def renew(self, worker: str, seconds: float, fingerprints: Sequence[str] | None = None) -> int:
        """Extend ``worker``'s leases (those listed, or all when None) to now + ``seconds``;
        returns how many. The scheduler lists what it holds, so a lease whose reply was lost
        in a connection drop is not kept alive."""
        return self._settle_fps(worker, Settle.RENEWED, fingerprints, seconds)

    def ack(self, worker: str, done: Sequence[tuple[str, int]]) -> int:
        """Mark ``(fingerprint, token)`` records done (token rules: :meth:`settle`; ``worker``
        is informational). Returns how many changed; a repeated ack is harmless."""
        if not done:
            return 0
        return self.settle(worker, Settle.DONE, [Settled(fp, token) for fp, token in done])

    def fail(self, worker: str, failed: Sequence[tuple[str, int, str, str]]) -> int:
        """Mark ``(fingerprint, token, cls, reason)`` records terminally failed (token rules
        as in :meth:`ack`), keeping class and reason (see :meth:`requeue`)."""
        if not failed:
            return 0
        return self.settle(worker, Settle.FAILED, [Settled(*f) for f in failed])

    def release(self, worker: str, fingerprints: Sequence[str] | None = None) -> int:
        """Return ``worker``'s leases (all, or those listed) to pending, keeping their place
        in line (a clean shutdown's unprocessed buffer)."""
        return self._settle_fps(worker, Settle.RELEASED, fingerprints)

    def reclaim(self, worker: str | None = None) -> int:
        """Return every expired lease to pending, plus every lease of ``worker`` (the caller
        is that worker restarted), and feed messages of workers no longer alive to the feed
        (:attr:`Settle.RECLAIMED`). Returns how many leases."""
        return self.settle(worker, Settle.RECLAIMED, None)

    def dead_letter(self, fingerprint: str, reason: str) -> None:
        """Move a record that cannot be decoded to the dead letters with ``reason``."""
        self.settle(None, Settle.DEAD, [Settled(fingerprint, reason=reason)])

    def resolve(self, fingerprints: Sequence[str]) -> int:
        """Failed records among ``fingerprints`` become done: their output was recovered
        without fetching them again (``scrapy scale replay``). Records in any other state are
        left as they are (a replay never takes a lease from a worker). Returns how many."""
        return self._settle_fps(None, Settle.RESOLVED, fingerprints) if fingerprints else 0

    def _settle_fps(
        self, worker: str | None, change: Settle, fingerprints: Sequence[str] | None, seconds: float = 0.0
    ) -> int:
        if fingerprints is None:
            return self.settle(worker, change, None, seconds)
        if not fingerprints:
            return 0
        return self.settle(worker, change, [Settled(fp) for fp in fingerprints], seconds)

    def requeue(self, cls: str | None = None) -> int:
        """:meth:`requeue_failed`, and the run reopened if it had ended. Returns how many."""
        n = self.requeue_failed(cls)
        if n:
            self.reopen_run()
        return n

    def counts(self) -> dict[str, int]:
        """Records by state, keys :data:`COUNT_KEYS` (``delayed`` apart from
        ``pending``). Cheap (maintained counters, not a scan)."""
        return self.summary(Want.COUNTS).counts

    def drained(self) -> bool:
        """No pending, delayed or leased record."""
        c = self.counts()
        return not (c["pending"] or c["delayed"] or c["leased"])

    def next_eligible_at(self) -> float | None:
        """The earliest not-before time among delayed records (None when none)."""
        return self.summary(Want.NEXT_ELIGIBLE).next_eligible_at

    def status(self) -> Status:
        """Counts by state and failure class, oldest pending age, average wait,
        leases per worker, the run; see :class:`Status`."""
        status = self.summary(Want.STATUS).status
        if status is None:  # pragma: no cover - a backend that breaks the contract
            raise FrontierError(f"{type(self).__name__} read no status")
        return status

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Dead letters, oldest first."""
        return self.summary(Want.DEAD_LETTERS, limit).dead_letters

    def dead_letter_count(self) -> int:
        """How many dead letters the current run has (cheap: no scan of the records)."""
        return self.summary(Want.DEAD_COUNT).dead_letter_count

    def seed(
        self, requests: Iterable[Request | str], priority: int = 0, rules: RecordRules | None = None
    ) -> list[EnqueueResult]:
        """Enqueue seeds from outside a crawl (``scrapy scale seed JOB URL...``):
        URLs or Requests, fingerprinted with Scrapy's default fingerprinter,
        deduplicated like any request. An ended run is reopened so workers pick
        the seeds up (a new ``scrapy crawl`` joins it instead of starting over).
        ``rules``: what a seed may be (default: http and https URLs)."""
        from scrapy_scale.frontier.records.codec import new_request

        batch = [new_request(r, priority=priority, rules=rules) for r in requests]
        self.reopen_run()
        return self.enqueue(batch)


__all__ = [
    "AGAIN_SEP",
    "COUNT_KEYS",
    "DELAYED_SAMPLE",
    "DeadLetter",
    "EnqueueResult",
    "FrontierError",
    "FrontierFatal",
    "FrontierStore",
    "Leased",
    "NewRequest",
    "RunChange",
    "RunInfo",
    "Settle",
    "Settled",
    "State",
    "Status",
    "StoreWaiting",
    "Summary",
    "Want",
    "WorkerTable",
    "again_key",
    "domain_of",
    "key_base",
]
