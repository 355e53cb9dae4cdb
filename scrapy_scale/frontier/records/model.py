"""The frontier's records and their states, as plain data: what the store interface
(:mod:`scrapy_scale.frontier.store`) takes and gives, and the errors it raises.

No I/O; the codec (:mod:`scrapy_scale.frontier.records.codec`) builds :class:`NewRequest` values
from requests.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple
from urllib.parse import urlsplit

from scrapy_scale.errors import ScaleError


class FrontierError(ScaleError, RuntimeError):
    """The frontier cannot be used: the message says what is wrong and what to do.

    Raised at startup for an unknown URL scheme, an unreachable Redis, or a SQLite
    file of an incompatible layout.
    """


class FrontierFatal(FrontierError):
    """The frontier cannot go on (its store lost the job's state, or is corrupt): the crawl
    must stop with this message instead of retrying."""


class StoreWaiting(ScaleError):
    """A call made under :meth:`~scrapy_scale.frontier.store.FrontierStore.impatient` would
    wait for the store (its server unreachable, or another thread's round holding it): it
    stopped instead. Calls before it in the same batch may have been written; the scripts
    and statements are idempotent under a retry, so the caller writes them all again later."""


class State(StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"


class EnqueueResult(StrEnum):
    #: a new record was created (pending)
    ADDED = "added"
    #: an existing record was overwritten and made pending again (a retry/redirect)
    UPDATED = "updated"
    #: a done/failed record was made pending again (``reopen=True``, i.e. dont_filter)
    REOPENED = "reopened"
    #: the fingerprint is known; nothing changed
    DUPLICATE = "duplicate"
    #: an update whose lease token had passed on (the record was leased again, finished
    #: or failed since): refused like a late ack; nothing changed
    STALE = "stale"


#: between a fingerprint and the suffix of a record of its own (``NewRequest.again``);
#: never in a fingerprint (hex)
AGAIN_SEP = "~"


def again_key(fingerprint: str) -> str:
    """A record key of its own for one more fetch of ``fingerprint`` (a ``dont_filter``
    request while the fingerprint's record is pending or leased): unique across workers
    and restarts."""
    return f"{fingerprint}{AGAIN_SEP}{secrets.token_hex(6)}"


def key_base(key: str) -> str:
    """The fingerprint a record key stands for (the key itself, or the part before the
    suffix of :func:`again_key`)."""
    return key.split(AGAIN_SEP, 1)[0]


@dataclass(frozen=True, slots=True)
class NewRequest:
    """What :meth:`FrontierStore.enqueue` takes: one request, already encoded."""

    fingerprint: str
    #: the request as data: :func:`scrapy_scale.frontier.records.codec.encode` output (versioned JSON)
    data: str
    #: host of the request URL (fairness unit); see :func:`domain_of`
    domain: str
    priority: int = 0
    #: epoch seconds; 0 = eligible at once. A later time makes the record *delayed*.
    not_before: float = 0.0
    #: attempts already made before this one (a retry with meta scale_attempt=n gives n-1)
    attempts: int = 0
    #: (failure class, reason) of the previous attempt, for a retry
    last_failure: tuple[str, str] | None = None
    #: True for a continuation of a known request (a retry or redirect): if the
    #: fingerprint exists in any state, overwrite its data, priority and domain,
    #: make it pending with ``not_before``, set attempts and last failure, clear
    #: its lease (and invalidate the old lease token). Inserts when unknown.
    update: bool = False
    #: with ``update``: the lease token of the request it continues, when its worker holds
    #: one. The update is then refused (``STALE``) unless the record still has that token
    #: and is not finished, so a worker whose lease passed on (frozen, cut off) cannot
    #: reopen a record another worker finished, nor take back a lease another worker holds.
    token: int | None = None
    #: True for ``dont_filter`` requests: a done or failed record with this
    #: fingerprint becomes pending again (attempts reset). A pending or leased
    #: record is left alone (DUPLICATE), unless ``again`` is set.
    reopen: bool = False
    #: with ``reopen``: the key of a record of its own for this request when the
    #: fingerprint's record is pending or leased (``dont_filter`` fetches again
    #: whatever the state: the new record is ADDED, or DUPLICATE if ``again`` exists)
    again: str = ""
    #: a worker id for a request only that worker can serve (kept in its memory: its
    #: values cannot be stored; ``data`` says why): when the fingerprint is new, the
    #: record is created leased to that worker for ``held_seconds`` (token 0), so it
    #: is deduplicated like any other and acked as usual; a known one is DUPLICATE.
    #: If the worker stops before acking it, the lease comes back and the record
    #: (no request in it) is dead-lettered by whoever leases it.
    held_by: str = ""
    held_seconds: float = 0.0
    #: where it waits in its (priority, domain) queue: False (a request the crawl found)
    #: goes ahead of everything waiting there, newest first (LIFO, as Scrapy's default
    #: queues); True (a start request, a seed, or every request when the project asks for
    #: FIFO) goes behind, in arrival order. See docs/frontier.md, "Order".
    tail: bool = False


@dataclass(frozen=True, slots=True)
class Leased:
    """One leased record, as :meth:`FrontierStore.lease` returns it."""

    fingerprint: str
    data: str
    domain: str
    priority: int
    #: attempts made before this lease (0 for a fresh request)
    attempts: int
    enqueued_at: float
    #: when the record became eligible (enqueue time or its not-before time)
    eligible_at: float
    #: lease token: :meth:`FrontierStore.ack` / :meth:`FrontierStore.fail` must quote it
    token: int
    last_failure: tuple[str, str] | None = None
    #: set when the record's fields cannot be read (a corrupt record): the store has
    #: already moved it to the dead letters with this reason, and the other fields
    #: are placeholders; the rest of the batch is leased as usual
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of a job (a crawl from its first seed to its drain)."""

    run_id: int
    started_at: float
    ended_at: float | None = None
    #: True when :meth:`FrontierStore.begin_run` joined/resumed an unfinished run
    resumed: bool = False
    #: counts by state when the run ended (empty while it runs)
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    fingerprint: str
    reason: str
    data: str
    at: float


@dataclass(frozen=True, slots=True)
class Status:
    """What ``scrapy scale status JOB`` prints; cheap enough to call while the job runs."""

    job: str
    #: the current (or last) run, None before the first
    run: RunInfo | None
    #: records by state: ``pending`` (eligible now), ``delayed`` (pending, not yet
    #: eligible), ``leased``, ``done``, ``failed``; every key always present
    counts: dict[str, int]
    #: failed records by failure class
    failed_by_class: dict[str, int]
    #: seconds since the oldest eligible pending record became eligible (None if none)
    oldest_pending_age: float | None
    #: mean seconds a leased record waited between becoming eligible and its lease
    #: (over every lease of the current run; None before the first lease)
    average_wait: float | None
    #: unexpired leases held by each worker id
    leases_by_worker: dict[str, int]
    dead_letters: int
    #: worker heartbeats (:meth:`FrontierStore.heartbeat`) of the current run:
    #: worker id -> (last beat, alive until), epoch seconds
    workers: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: False when ``oldest_pending_age`` is a lower bound: on Redis with very many
    #: domains, status looks at the first ``STATUS_DOMAINS`` in service order only
    oldest_pending_exact: bool = True
    #: delayed records of requests already tried (retries waiting for their backoff, or
    #: for their site's turn after it); the other delayed records are first attempts the
    #: pacer put back until their site's turn. None: not known (on Redis with very many
    #: delayed records, an estimate from the first :data:`DELAYED_SAMPLE` of them)
    delayed_retries: int | None = None
    #: the latest next-eligible time among the delayed records (None: none)
    last_eligible_at: float | None = None

    def live_workers(self, now: float) -> list[str]:
        """Workers whose last heartbeat still holds at ``now``."""
        return sorted(w for w, (_, until) in self.workers.items() if until >= now)

    def last_seen(self) -> float | None:
        """When a worker of the current run was last heard from (its last heartbeat; the
        run's start when none has beaten since), None without a run."""
        beats = [at for at, _ in self.workers.values()]
        if self.run is not None:
            beats.append(self.run.started_at)
        return max(beats, default=None)

    @property
    def drained(self) -> bool:
        """Nothing left to do: no pending, delayed or leased record."""
        return not (self.counts["pending"] or self.counts["delayed"] or self.counts["leased"])


class RunChange(StrEnum):
    """A transition of the job's run record (:meth:`FrontierStore.change_run`)."""

    #: join the current run if it has not ended, else start a new one (records wiped)
    BEGIN = "begin"
    #: end the run if it is drained (its counts recorded); None when it is not
    FINISH = "finish"
    #: an ended run runs again (none: a run starts)
    REOPEN = "reopen"
    #: every record, lease, dead letter and feed message deleted, the run ended ("reset")
    RESET = "reset"


class Settle(StrEnum):
    """What :meth:`FrontierStore.settle` does to the records it is given."""

    #: leased/pending -> done, when the token still matches (ack)
    DONE = "done"
    #: leased/pending -> failed with class and reason, when the token matches (fail)
    FAILED = "failed"
    #: the worker's leases (listed, or all) -> pending, keeping their place (release)
    RELEASED = "released"
    #: every expired lease and every lease of the worker -> pending (reclaim)
    RECLAIMED = "reclaimed"
    #: the worker's leases (listed, or all) held ``seconds`` more (renew)
    RENEWED = "renewed"
    #: a record that cannot be read -> the dead letters, with its reason
    DEAD = "dead"
    #: failed -> done: their output was recovered (replay)
    RESOLVED = "resolved"


class Settled(NamedTuple):
    """One record handed to :meth:`FrontierStore.settle`; the fields a change does not
    use are left at their defaults."""

    fingerprint: str
    #: the lease token (DONE, FAILED)
    token: int = 0
    #: the failure class (FAILED)
    cls: str = ""
    #: the failure reason (FAILED), the dead letter's reason (DEAD)
    reason: str = ""


class Want(StrEnum):
    """Which part of the job's summary :meth:`FrontierStore.summary` reads."""

    #: records by state (cheap: counters)
    COUNTS = "counts"
    #: the earliest eligible time among delayed records
    NEXT_ELIGIBLE = "next_eligible"
    #: everything ``scrapy scale status`` shows (:class:`Status`)
    STATUS = "status"
    #: the dead letters, oldest first, up to a limit
    DEAD_LETTERS = "dead_letters"
    #: how many dead letters (cheap)
    DEAD_COUNT = "dead_count"


@dataclass(frozen=True, slots=True)
class Summary:
    """A read of the job's summary: the part asked for (:class:`Want`) is set."""

    counts: dict[str, int] = field(default_factory=dict)
    next_eligible_at: float | None = None
    status: Status | None = None
    dead_letters: list[DeadLetter] = field(default_factory=list)
    dead_letter_count: int = 0


class WorkerTable(StrEnum):
    """The two per-job tables of workers (:meth:`FrontierStore.read_workers`)."""

    #: worker id -> pid (kept across runs: a restarted worker claims its id back)
    PIDS = "pids"
    #: worker id -> (last beat, alive until) of the current run
    BEATS = "beats"


COUNT_KEYS = ("pending", "delayed", "leased", "done", "failed")
#: delayed records status looks at, at most, to tell retries from requests held by pacing
DELAYED_SAMPLE = 2_000


def domain_of(url: str) -> str:
    """The fairness unit of a URL: its lower-case host (no port, no userinfo)."""
    return (urlsplit(url).hostname or "").lower()
