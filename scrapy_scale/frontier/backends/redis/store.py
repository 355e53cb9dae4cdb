"""The Redis frontier store: many workers, atomic Lua scripts, Cluster-safe keys.

:class:`RedisStore` is the store contract (:class:`~scrapy_scale.frontier.store.FrontierStore`)
over units it owns: the connection and partitions (:mod:`.connection`), the run record and
workers (:mod:`.runs`), the records (:mod:`.records`), the reads (:mod:`.reads`; status,
:mod:`.status`).

A job's keys are in partitions by site (:mod:`.partitions`): partition 0 starts with
``scale:{JOB}``, partition i with ``scale:{JOB/pi.N}`` (N chosen so that the partitions'
slots spread evenly; ``scale:{JOB/pi}`` in a job of the first naming); each hash tag is one
Redis Cluster slot, so every script (one partition's keys) runs on a Cluster too. The run-level keys
(run, runs, workers, alive, seeds) are in partition 0 only; each other partition has a
``run`` hash with the run id alone. Below, ``{J}`` is a partition's tag. Keys of one run
live under ``scale:{J}:RUN:`` so starting a new run is one atomic switch; the old run's
keys are unlinked afterwards.

    scale:{J}:run            HASH  current run: id, started, ended, parts (the partition count
                                   and naming, partition 0 only: 12/slot; 12 the first naming)
    scale:{J}:runs           HASH  run id -> JSON (history)
    scale:{J}:workers        HASH  worker id -> pid (claim_worker)
    scale:{J}:alive          HASH  worker id -> "last_beat until" (heartbeat; see redis_status)
    scale:{J}:seeds          LIST  JSON seeds pushed by feeders (RPUSH; see docs/frontier.md)
    scale:{J}:seeds:taken:W  LIST  seeds worker W took from the feed and has not written yet
    scale:{J}:seeds:takers   SET   workers with a taken list (back to the feed once not alive)
    scale:{J}:R:r:FP         HASH  one record not done: st d dom p a el enq fc fr o le t (el only
                                   when it differs from enq; d: the request, codec.encode)
    scale:{J}:R:d:PREFIX     HASH  done fingerprints: member = the fingerprint after PREFIX (its
                                   first 3 to 7 characters, more as the run grows), hex packed
                                   to bytes; small enough to stay listpacks (lua/prelude.lua)
    scale:{J}:R:prios        ZSET  priorities with ready work
    scale:{J}:R:dq:P         ZSET  domains with ready work at priority P, by last service
    scale:{J}:R:q:P:DOMAIN   LIST  ready fingerprints, popped from the head: a crawl's request is
                                   pushed at the head (LIFO), a seed, start request or FIFO one at
                                   the tail, a due retry or released lease at the head (stale
                                   entries skipped at lease)
    scale:{J}:R:delayed      ZSET  delayed fingerprints by eligible time
    scale:{J}:R:leases       ZSET  leased fingerprints by lease expiry
    scale:{J}:R:wl:WORKER    SET   fingerprints leased by a worker
    scale:{J}:R:owners       SET   workers that leased in this run
    scale:{J}:R:failed:CLS   SET   failed fingerprints of a class
    scale:{J}:R:cnt          HASH  counters by state, fail:CLS, wait_sum, wait_n, served
    scale:{J}:R:dead/deadz   HASH/ZSET dead letters

Connection drops (a Redis restart) are retried with backoff for as long as
``retry_for`` allows (forever by default: the worker waits). Scripts are
idempotent under a retry: tokens make a repeated ack a no-op, a repeated enqueue
is a duplicate, and a lease whose reply was lost expires (it is not renewed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.backends.redis import partitions
from scrapy_scale.frontier.backends.redis import status as redis_status
from scrapy_scale.frontier.backends.redis.connection import RedisConnection, glob_escape
from scrapy_scale.frontier.backends.redis.reads import RedisReads
from scrapy_scale.frontier.backends.redis.records import RedisRecords, packs
from scrapy_scale.frontier.backends.redis.runs import RedisRuns
from scrapy_scale.frontier.store import (
    EnqueueResult,
    FrontierStore,
    Leased,
    NewRequest,
    RunChange,
    RunInfo,
    Settle,
    Settled,
    Summary,
    Want,
    WorkerTable,
)

__all__ = ["RedisStore", "glob_escape", "packs"]


class RedisStore(FrontierStore):
    schemes = ("redis", "rediss")

    def __init__(
        self, url: str, job: str, clock: clock_mod.Clock = clock_mod.wall, partitions: int | None = None
    ) -> None:
        self.conn = RedisConnection(url, job, clock, partitions)
        super().__init__(job, clock)
        self.run_record = RedisRuns(self.conn)
        self.records = RedisRecords(self.conn)
        self.reads = RedisReads(self.conn, self.run_record)

    # ---- the contract ----------------------------------------------------------------

    def open(self) -> None:
        self.conn.open()

    def close(self) -> None:
        self.conn.close()

    def change_run(self, change: RunChange) -> RunInfo | None:
        return self.run_record.change(change)

    def runs(self) -> list[RunInfo]:
        return self.run_record.runs()

    def read_workers(self, table: WorkerTable) -> dict[str, Any]:
        return self.run_record.read_workers(table)

    def write_worker(self, table: WorkerTable, worker: str, value: float, seen: Any = None) -> bool:
        return self.run_record.write_worker(table, worker, value, seen)

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        return self.records.enqueue(requests)

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        return self.records.lease(worker, n, seconds)

    def settle(self, worker: str | None, change: Settle, rows: Sequence[Settled] | None, seconds: float = 0.0) -> int:
        return self.records.settle(worker, change, rows, seconds)

    def summary(self, want: Want, limit: int = 100) -> Summary:
        if want is Want.STATUS:
            return Summary(status=redis_status.read_status(self))
        return self.reads.summary(want, limit)

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        return self.reads.get(fingerprint)

    def requeue_failed(self, cls: str | None) -> int:
        return self.records.requeue_failed(cls)

    # ---- optional ----------------------------------------------------------------------

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        return self.records.enqueue_new(requests)

    def durability_warning(self) -> str | None:
        return self.reads.durability_warning()

    def impatient(self) -> AbstractContextManager[object]:
        return self.conn.impatient()

    def give_up_after(self, seconds: float) -> None:
        self.conn.retry_for = seconds

    def known_jobs(self) -> list[str]:
        return self.reads.known_jobs()

    @property
    def feed_key(self) -> str:
        return self.records.feed_key

    def take_feed(self, worker: str, n: int) -> list[str]:
        return self.records.take_feed(worker, n)

    def feed_done(self, worker: str) -> None:
        self.records.feed_done(worker)

    # ---- what tools, status reads and tests name ----------------------------------------

    @property  # type: ignore[override]
    def clock(self) -> clock_mod.Clock:
        """The store's clock, the one its units read (a test may set another)."""
        return self.conn.clock

    @clock.setter
    def clock(self, clock: clock_mod.Clock) -> None:
        self.conn.clock = clock

    @property
    def url(self) -> str:
        return self.conn.url

    @property
    def r(self) -> Any:
        """The client (redis.Redis with decode_responses=True: str replies)."""
        return self.conn.r

    @property
    def key(self) -> str:
        """The key prefix of partition 0 (``scale:{JOB}``)."""
        return self.conn.key

    @property
    def keys(self) -> list[str]:
        """The key prefix of each partition, partition 0 first."""
        return self.conn.keys

    @property
    def parts(self) -> int:
        """The job's partition count (once open)."""
        return self.conn.parts

    def use_layout(self, layout: partitions.Layout) -> None:
        """Use these partitions and their naming (what :meth:`open` chose, or another)."""
        self.conn.use_layout(layout)

    @property
    def cluster(self) -> bool:
        """True when the URL points at a Redis Cluster node."""
        return self.conn.cluster

    @property
    def sleep(self) -> Callable[[float], None]:
        """How the retries wait (tests count the waits)."""
        return self.conn.sleep

    @sleep.setter
    def sleep(self, fn: Callable[[float], None]) -> None:
        self.conn.sleep = fn

    @property
    def alive_key(self) -> str:
        return self.run_record.alive_key

    def taken_key(self, worker: str) -> str:
        return self.records.taken_key(worker)

    def retrying(self, fn: Callable[[], Any]) -> Any:
        return self.conn.retrying(fn)

    def call_at(self, part: int, script: str, *args: Any) -> Any:
        return self.conn.call_at(part, script, *args)

    def call_at_bytes(self, part: int, script: str, *args: Any) -> Any:
        return self.conn.call_at_bytes(part, script, *args)

    def run_prefix(self, part: int = 0) -> str:
        return self.conn.run_prefix(part)

    def current_run(self) -> RunInfo | None:
        return self.run_record.current_run()

    def open_counts(self, part: int) -> dict[str, int] | None:
        return self.run_record.open_counts(part)
