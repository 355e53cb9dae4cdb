"""The frontier store: persisted request records of one job, and their states.

One interface, two backends (``sqlite:///path`` and ``redis://host:port/db``),
chosen by URL with :func:`scrapy_scale.frontier.backends.open_store`. The same conformance suite
(tests/crawl/test_frontier_store.py) runs against both.

Record lifecycle (one record per fingerprint per job)::

    pending --lease--> leased --ack--> done
       ^                 |   --fail--> failed(class, reason)
       |                 |   --enqueue(update=True)--> pending (next eligible time)
       +---reclaim/release+
    failed --requeue--> pending

Lease tokens: an ack, a fail, or an update that names one (``NewRequest.token``) is
refused once the record moved on from that lease (leased again, finished, failed), so a
worker frozen past its lease cannot finish, reopen or take back another worker's record.

"Pending" includes *delayed* records (next eligible time in the future): they are
pending but cannot be leased yet; :class:`Status` counts them apart.

Times are epoch seconds from the store's injectable ``clock``; the store never
reads the wall clock itself (tests pass :class:`scrapy_scale.clock.FakeClock`).

Thread-safety: a store object is used by one thread at a time (the scheduler
runs every store call in one dedicated thread, off the reactor). Several
processes may share one store (that is the point of Redis; SQLite is shared by
processes on one machine through its file lock).

Requests are stored as data, never pickle: :mod:`scrapy_scale.frontier.records.codec`
turns a :class:`scrapy.Request` into a versioned JSON string and back.

The records and their states (:class:`NewRequest`, :class:`Leased`, :class:`Status`, ...)
are in :mod:`scrapy_scale.frontier.records.model`, imported here for the store's users.
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
    RunInfo,
    State,
    Status,
    again_key,
    domain_of,
    key_base,
)

if TYPE_CHECKING:
    from scrapy import Request

    from scrapy_scale.frontier.records.codec import RecordRules


class FrontierStore(abc.ABC):
    """The persisted frontier of ONE job (``self.job``).

    Every method is synchronous and may block on I/O; callers keep it off the
    reactor thread. Methods that take several records do them in one round trip /
    one transaction, in the order given (an enqueue listed before an ack is durable
    no later than the ack).
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

    # ---- lifecycle -------------------------------------------------------------

    @abc.abstractmethod
    def open(self) -> None:
        """Connect and create or check the layout. Raises :class:`FrontierError`
        (unreachable server, incompatible layout) with what to do about it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. Idempotent. Leases stay (use :meth:`release` first)."""

    def fatal_error(self, error: BaseException) -> str | None:
        """What to tell the user when ``error`` (raised by a store call) means the frontier
        cannot go on (corrupt file, lost state): the crawl stops with it. None: an error
        that may pass (the call is tried again)."""
        return str(error) if isinstance(error, FrontierFatal) else None

    def durability_warning(self) -> str | None:
        """Why the store may lose the job's state on a crash of its server, or None."""
        return None

    def batch(self) -> AbstractContextManager[object]:
        """``with store.batch():`` groups the calls inside into as few round trips /
        transactions as the backend allows (SQLite: one transaction). Optional."""
        return nullcontext()

    def __enter__(self) -> FrontierStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- runs ------------------------------------------------------------------

    @abc.abstractmethod
    def begin_run(self) -> RunInfo:
        """Join the job's current run if it has not finished (``resumed=True``);
        otherwise start a new run: every record and dead letter of the job is
        deleted (the run history stays) and a new run id is recorded. Atomic, so
        workers starting together agree on one run."""

    @abc.abstractmethod
    def finish_run(self) -> RunInfo | None:
        """If the job is drained (no pending, delayed or leased record), mark the
        current run ended with its counts and return it; otherwise return None and
        change nothing. Idempotent: an ended run is returned as it is."""

    @abc.abstractmethod
    def runs(self) -> list[RunInfo]:
        """Run history, oldest first."""

    # ---- workers ---------------------------------------------------------------

    @abc.abstractmethod
    def claim_worker(self, prefix: str, pid: int, is_alive: Callable[[int], bool]) -> str:
        """Pick this process's worker id: ``f"{prefix}/{slot}"`` with the lowest slot
        whose recorded pid is absent or no longer alive (``is_alive(pid)`` False),
        and record ``pid`` for it. A restarted worker thus gets back its old id (and
        can take its own leases back at once with :meth:`reclaim`), while live
        siblings on the same host keep theirs. Use a ``prefix`` unique per host."""

    @abc.abstractmethod
    def heartbeat(self, worker: str, until: float) -> None:
        """Record that ``worker`` is alive now and stays so until ``until`` (epoch
        seconds) unless it beats again; ``until`` = now says it stopped (a clean close).
        :meth:`status` reports them (``scrapy scale status``: live workers, or
        ``interrupted`` when a running run has none). A new run or a reset forgets them."""

    @abc.abstractmethod
    def beats(self) -> dict[str, tuple[Any, Any]]:
        """The current run's heartbeats as stored: worker id -> (last beat, alive until),
        epoch seconds, read back unchecked (the caller checks them: :mod:`.scheduling.fair_share`)."""

    # ---- the hot path ----------------------------------------------------------

    @abc.abstractmethod
    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        """Add requests, deduplicated by fingerprint; see :class:`NewRequest` for
        ``update`` / ``reopen``. A request with ``not_before`` in the future is
        delayed. Returns one result per request, in order. One request listed twice
        in a batch behaves as two calls in that order."""

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        """:meth:`enqueue` for plain new requests (seeds: ``update``, ``reopen``,
        ``held_by``, ``not_before``, ``attempts`` and ``last_failure`` unset; they wait at the
        tail of their domain's queue whatever their ``tail``): a record is
        created for each unknown fingerprint, a known one is left alone. The records are
        those :meth:`enqueue` writes; only the count of added ones comes back."""
        return sum(1 for r in self.enqueue(requests) if r is EnqueueResult.ADDED)

    @abc.abstractmethod
    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        """Lease up to ``n`` eligible pending records to ``worker`` for ``seconds``.

        First moves due delayed records to pending. Order: highest priority first;
        within one priority, round-robin across domains (each domain with eligible
        work gets its turn, the least recently served first); inside a domain, the
        requests enqueued with ``tail=False`` newest first, then those with ``tail=True`` in
        arrival order (:attr:`NewRequest.tail`), a delayed record whose time came first of all.
        A lease gives the record a new token (it does not change ``attempts``:
        attempts are set by retries, ``NewRequest.attempts``). Returns [] when
        nothing is eligible.

        A record whose fields cannot be read (a number field holding ``x``, a
        missing field) is dead-lettered alone, with the field in its reason, and
        returned with :attr:`Leased.error` set; the others are leased."""

    @abc.abstractmethod
    def renew(self, worker: str, seconds: float, fingerprints: Sequence[str] | None = None) -> int:
        """Extend ``worker``'s leases (those listed, or all when None) to now +
        ``seconds``; returns how many. The scheduler lists what it really holds, so
        a lease whose reply was lost in a connection drop is not kept alive."""

    @abc.abstractmethod
    def ack(self, worker: str, done: Sequence[tuple[str, int]]) -> int:
        """Mark records done: each ``(fingerprint, token)`` whose record still has
        that token (no one leased or updated it since) and is leased or pending.
        ``worker`` is informational (the token is the proof). Returns how many
        changed; stale or unknown pairs are ignored, so a repeated ack is harmless."""

    @abc.abstractmethod
    def fail(self, worker: str, failed: Sequence[tuple[str, int, str, str]]) -> int:
        """Mark records terminally failed: ``(fingerprint, token, cls, reason)``;
        token rules as in :meth:`ack`. Keeps class and reason (see :meth:`requeue`)."""

    @abc.abstractmethod
    def release(self, worker: str, fingerprints: Sequence[str] | None = None) -> int:
        """Return ``worker``'s leases (all, or those listed) to pending at once,
        keeping their place in line. Used at clean shutdown for unprocessed buffer."""

    @abc.abstractmethod
    def reclaim(self, worker: str | None = None) -> int:
        """Return every expired lease to pending, plus every lease of ``worker``
        (expired or not: the caller is that worker restarted). Returns how many.
        A backend with a feed also puts the feed messages taken by workers that are no
        longer alive (:meth:`heartbeat` expired) back at the head of the feed."""

    @abc.abstractmethod
    def dead_letter(self, fingerprint: str, reason: str) -> None:
        """Move a record that cannot be decoded out of the frontier, into the
        dead-letter set with ``reason``; the crawl goes on without it."""

    @abc.abstractmethod
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Dead letters, oldest first."""

    def dead_letter_count(self) -> int:
        """How many dead letters the current run has (cheap: no scan of the records)."""
        return self.status().dead_letters

    # ---- outside feeders (Redis key for JSON seeds) -----------------------------

    def take_feed(self, worker: str, n: int) -> list[str]:
        """Up to ``n`` raw JSON seed messages pushed by feeders (see :attr:`feed_key`),
        moved atomically to ``worker``'s taken list until :meth:`feed_done`. While that
        list holds messages (a sync failed after taking them) it returns them again
        instead of new ones; :meth:`reclaim` puts the taken messages of a worker that is
        no longer alive back at the head of the feed. Backends without a feed return []."""
        return []

    def feed_done(self, worker: str) -> None:
        """``worker`` wrote the messages it took (:meth:`take_feed`): forget them."""
        return None

    @property
    def feed_key(self) -> str | None:
        """Where feeders push JSON seeds (Redis: a list key), or None."""
        return None

    # ---- observation -----------------------------------------------------------

    def give_up_after(self, seconds: float) -> None:
        """Stop retrying an unreachable server after ``seconds`` (a reader, a command); no-op
        for a backend that does not retry."""
        return None

    def known_jobs(self) -> list[str]:
        """Names of the jobs that have had a run in this frontier ([]: it cannot tell)."""
        return []

    @abc.abstractmethod
    def counts(self) -> dict[str, int]:
        """Records by state, keys :data:`COUNT_KEYS` (``delayed`` apart from
        ``pending``). Cheap (maintained counters, not a scan)."""

    def drained(self) -> bool:
        """No pending, delayed or leased record."""
        c = self.counts()
        return not (c["pending"] or c["delayed"] or c["leased"])

    @abc.abstractmethod
    def next_eligible_at(self) -> float | None:
        """The earliest not-before time among delayed records (None when none)."""

    @abc.abstractmethod
    def status(self) -> Status:
        """Counts by state and failure class, oldest pending age, average wait,
        leases per worker, the run; see :class:`Status`."""

    @abc.abstractmethod
    def get(self, fingerprint: str) -> dict[str, object] | None:
        """One record as a dict (keys: fingerprint, state, data, domain, priority,
        attempts, eligible_at, enqueued_at, last_failure, owner, lease_expires,
        token), or None. ``state`` is a :class:`State` value; a delayed record
        has state ``pending`` and ``eligible_at`` in the future."""

    # ---- commands ----------------------------------------------------------------

    @abc.abstractmethod
    def reset(self) -> None:
        """Start over: delete every record, lease, dead letter and feed message of
        the job and end the current run (reason ``reset``); run history stays."""

    @abc.abstractmethod
    def requeue(self, cls: str | None = None) -> int:
        """Failed records of failure class ``cls`` (every class if None) become
        pending again, eligible now, attempts reset to 0, last failure kept.
        Also reopens the run if it had ended. Returns how many."""

    def resolve(self, fingerprints: Sequence[str]) -> int:
        """Failed records among ``fingerprints`` become done: their output was recovered
        without fetching them again (``scrapy scale replay``). Records in any other state are
        left as they are (a replay never takes a lease from a worker). Returns how many."""
        raise NotImplementedError(f"{type(self).__name__} cannot resolve failed records")

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

    @abc.abstractmethod
    def reopen_run(self) -> None:
        """If the current run has ended, mark it running again (no-op otherwise;
        starts a run when there is none)."""


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
    "RunInfo",
    "State",
    "Status",
    "again_key",
    "domain_of",
    "key_base",
]
