"""The SQLite frontier's writes of records (:class:`SqliteRecords`): enqueue (new
requests, updates, reopened ones, seeds in bulk) and requeue of failed records."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any

from scrapy_scale.frontier.backends.sqlite.file import SqliteFile
from scrapy_scale.frontier.backends.sqlite.schema import DELAYED, DONE, FAILED, LEASED, READY, SEED_CACHE_KIB
from scrapy_scale.frontier.store import EnqueueResult, NewRequest


class SqliteRecords:
    """Records written into the store's file for one job."""

    def __init__(self, file: SqliteFile):
        self.file = file
        self.job = file.job

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        if not requests:
            return []
        out: list[EnqueueResult] = []
        now = self.file.clock()
        with self.file.tx() as db:
            seq = self.file.next_seq(db, len(requests))
            for i, r in enumerate(requests):
                # the ready queue is read newest seq first: a tail request gets a negative seq
                # (behind every head one, oldest first), a head one a positive seq (newest first)
                out.append(self._enqueue_one(db, r, now, -(seq + i) if r.tail else seq + i))
        return out

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        # what _enqueue_one does for a plain new request, one statement for the batch: the
        # unique (job, fp) index does the dedup a SELECT per request did
        if not requests:
            return 0
        if len(requests) >= 1000 and not self.file.seed_cache:
            # a big seeding inserts at random places of the fingerprint index: with SQLite's
            # default 2 MB page cache, twice as slow (this connection only)
            self.file.db.execute(f"PRAGMA cache_size=-{SEED_CACHE_KIB}")
            self.file.seed_cache = True
        now = self.file.clock()
        job = self.job
        with self.file.tx() as db:
            seq = self.file.next_seq(db, len(requests))
            cur = db.executemany(
                "INSERT INTO requests (job, fp, state, data, domain, priority, attempts, eligible_at, "
                "enqueued_at, seq) VALUES (?, ?, 0, ?, ?, ?, 0, ?, ?, ?) ON CONFLICT (job, fp) DO NOTHING",
                [
                    (job, r.fingerprint, r.data, r.domain, r.priority, now, now, -(seq + i))
                    for i, r in enumerate(requests)
                ],
            )
            return int(cur.rowcount)

    def _enqueue_one(self, db: sqlite3.Connection, r: NewRequest, now: float, seq: int) -> EnqueueResult:
        row = db.execute(
            "SELECT id, state, token FROM requests WHERE job=? AND fp=?", (self.job, r.fingerprint)
        ).fetchone()
        if row is not None and r.reopen and r.again and row[1] not in (DONE, FAILED):
            # dont_filter while the record is pending or leased: a record of its own
            r = dataclasses.replace(r, fingerprint=r.again, reopen=False, again="")
            row = db.execute(
                "SELECT id, state, token FROM requests WHERE job=? AND fp=?", (self.job, r.fingerprint)
            ).fetchone()
        eligible = max(now, r.not_before or 0.0)
        state = DELAYED if eligible > now else READY
        fcls, freason = r.last_failure if r.last_failure else (None, None)
        if row is None:
            owner, expires = (r.held_by, now + r.held_seconds) if r.held_by else (None, None)
            db.execute(
                "INSERT INTO requests (job, fp, state, data, domain, priority, attempts, eligible_at, "
                "enqueued_at, fail_cls, fail_reason, seq, owner, lease_expires) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.job,
                    r.fingerprint,
                    LEASED if r.held_by else state,
                    r.data,
                    r.domain,
                    r.priority,
                    r.attempts,
                    eligible,
                    now,
                    fcls,
                    freason,
                    seq,
                    owner,
                    expires,
                ),
            )
            return EnqueueResult.ADDED
        rid, old_state, token = row
        if r.held_by:
            return EnqueueResult.DUPLICATE
        if r.update and r.token is not None and (old_state in (DONE, FAILED) or token != r.token):
            # its lease passed on (leased again, finished or failed since): refused like a
            # late ack, so it neither reopens a finished record nor takes another's lease
            return EnqueueResult.STALE
        if r.update or (r.reopen and old_state in (DONE, FAILED)):
            attempts = r.attempts if r.update else 0
            db.execute(
                "UPDATE requests SET state=?, data=?, domain=?, priority=?, attempts=?, eligible_at=?, "
                "fail_cls=?, fail_reason=?, owner=NULL, lease_expires=NULL, token=token+1, seq=? "
                "WHERE id=?",
                (state, r.data, r.domain, r.priority, attempts, eligible, fcls, freason, seq, rid),
            )
            return EnqueueResult.UPDATED if r.update else EnqueueResult.REOPENED
        return EnqueueResult.DUPLICATE

    def requeue_failed(self, cls: str | None) -> int:
        now = self.file.clock()
        with self.file.tx() as db:
            where = "job=? AND state=4" + (" AND fail_cls=?" if cls is not None else "")
            args: tuple[Any, ...] = (self.job,) + ((cls,) if cls is not None else ())
            (k,) = db.execute(f"SELECT COUNT(*) FROM requests WHERE {where}", args).fetchone()  # noqa: S608
            if not k:
                return 0
            seq = self.file.next_seq(db, k)
            n = db.execute(
                f"UPDATE requests SET state=0, attempts=0, eligible_at=?, seq=?, token=token+1 "  # noqa: S608
                f"WHERE {where}",
                (now, -seq) + args,  # behind the queue's other requests, as on Redis
            ).rowcount
        return n
