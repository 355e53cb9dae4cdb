"""The SQLite frontier store: one file (WAL), no server, survives kill -9.

The records of one job: the hot path (enqueue, lease, renew, ack, fail, release,
reclaim, dead letters), what status reads, and the commands (reset, resolve, requeue).
The file's layout is :mod:`.schema`; its connection, runs and workers :mod:`.base`.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.ordering import fair_shares, interleave
from scrapy_scale.frontier.backends.sqlite.base import SqliteBase
from scrapy_scale.frontier.backends.sqlite.schema import (
    DELAYED,
    DONE,
    FAILED,
    LEASED,
    PUBLIC_STATES,
    READY,
    SEED_CACHE_KIB,
    STATE_NAMES,
    unreadable,
)
from scrapy_scale.frontier.backends.workers_read import beats as checked_beats
from scrapy_scale.frontier.store import (
    COUNT_KEYS,
    DeadLetter,
    EnqueueResult,
    Leased,
    NewRequest,
    Status,
)


class SqliteStore(SqliteBase):
    schemes = ("sqlite",)

    # ---- hot path ----------------------------------------------------------------------

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        if not requests:
            return []
        out: list[EnqueueResult] = []
        now = self.clock()
        with self._tx() as db:
            seq = self._next_seq(db, len(requests))
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
        if len(requests) >= 1000 and not self._seed_cache:
            # a big seeding inserts at random places of the fingerprint index: with SQLite's
            # default 2 MB page cache, twice as slow (this connection only)
            self.db.execute(f"PRAGMA cache_size=-{SEED_CACHE_KIB}")
            self._seed_cache = True
        now = self.clock()
        job = self.job
        with self._tx() as db:
            seq = self._next_seq(db, len(requests))
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

    def _promote(self, db: sqlite3.Connection, now: float) -> None:
        # a due retry (or a request waiting for its turn) goes first in its queue, as on
        # Redis, the earliest due first: each its own seq (one seq for all of them left the
        # tie to the index, which reads the newest record first: deferred start requests
        # came back in reverse)
        ids = db.execute(
            "SELECT id FROM requests WHERE job=? AND state=1 AND eligible_at<=? ORDER BY eligible_at DESC, id DESC",
            (self.job, now),
        ).fetchall()
        if not ids:
            return
        seq = self._next_seq(db, len(ids))
        db.executemany(
            "UPDATE requests SET state=0, seq=? WHERE id=?", [(seq + i, rid) for i, (rid,) in enumerate(ids)]
        )

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        now = self.clock()
        with self._tx() as db:
            self._promote(db, now)
            queues = db.execute(
                "SELECT priority, domain, n FROM queues WHERE job=? AND n>0 ORDER BY priority DESC, served LIMIT ?",
                (self.job, n),
            ).fetchall()
            groups: list[list[Leased]] = []
            leased: list[Leased] = []
            left = n
            i = 0
            while i < len(queues) and left > 0:
                prio = queues[i][0]
                level = [q for q in queues[i:] if q[0] == prio]
                i += len(level)
                shares = fair_shares([q[2] for q in level], left)
                took = [
                    self._take(db, worker, p, domain, k, now, seconds)
                    for (p, domain, _), k in zip(level, shares, strict=True)
                    if k
                ]
                left -= sum(len(g) for g in took)
                groups += took
                # round-robin across domains within one priority level; levels never mix
                leased += interleave(took)
            if leased:
                served = self._next_seq_served(db, len(groups))
                db.executemany(
                    "UPDATE queues SET served=? WHERE job=? AND priority=? AND domain=?",
                    [(served + j, self.job, g[0].priority, g[0].domain) for j, g in enumerate(groups) if g],
                )
                ok = [x for x in leased if x.error is None]
                wait = sum(max(0.0, now - x.eligible_at) for x in ok)
                db.execute(
                    "UPDATE jobs SET wait_sum=wait_sum+?, wait_n=wait_n+? WHERE job=?", (wait, len(ok), self.job)
                )
        return leased

    def _next_seq_served(self, db: sqlite3.Connection, k: int) -> int:
        (s,) = db.execute("UPDATE jobs SET served = served + ? WHERE job=? RETURNING served", (k, self.job)).fetchone()
        return int(s) - k + 1

    def _take(
        self, db: sqlite3.Connection, worker: str, prio: int, domain: str, k: int, now: float, seconds: float
    ) -> list[Leased]:
        rows = db.execute(
            "SELECT id, fp, data, attempts, enqueued_at, eligible_at, token, fail_cls, fail_reason "
            "FROM requests WHERE job=? AND state=0 AND priority=? AND domain=? ORDER BY seq DESC LIMIT ?",
            (self.job, prio, domain, k),
        ).fetchall()
        bad = {r[0]: why for r in rows if (why := unreadable(r))}
        db.executemany(
            "UPDATE requests SET state=2, owner=?, lease_expires=?, token=token+1 WHERE id=?",
            [(worker, now + seconds, r[0]) for r in rows if r[0] not in bad],
        )
        out = []
        for r in rows:
            if r[0] in bad:  # dead-lettered alone; the rest of the batch goes on
                reason = f"unreadable record: {bad[r[0]]}"
                self.dead_letter(r[1], reason)
                out.append(Leased(r[1], "", domain, prio, 0, 0.0, 0.0, 0, error=reason))
                continue
            out.append(
                Leased(r[1], r[2], domain, prio, r[3], r[4], r[5], r[6] + 1, (r[7], r[8] or "") if r[7] else None)
            )
        return out

    def renew(self, worker: str, seconds: float, fingerprints: Sequence[str] | None = None) -> int:
        until = self.clock() + seconds
        with self._tx() as db:
            if fingerprints is None:
                return db.execute(
                    "UPDATE requests SET lease_expires=? WHERE job=? AND state=2 AND owner=?",
                    (until, self.job, worker),
                ).rowcount
            n = 0
            for fp in fingerprints:
                n += db.execute(
                    "UPDATE requests SET lease_expires=? WHERE job=? AND fp=? AND state=2 AND owner=?",
                    (until, self.job, fp, worker),
                ).rowcount
            return n

    def ack(self, worker: str, done: Sequence[tuple[str, int]]) -> int:
        if not done:
            return 0
        with self._tx() as db:
            changed = 0
            for fp, token in done:
                cur = db.execute(
                    # done: the request itself is no longer needed (dedup and status keep the row)
                    "UPDATE requests SET state=3, data='', domain='', owner=NULL, lease_expires=NULL "
                    "WHERE job=? AND fp=? AND token=? AND state IN (0, 1, 2)",
                    (self.job, fp, token),
                )
                changed += cur.rowcount
            return changed

    def fail(self, worker: str, failed: Sequence[tuple[str, int, str, str]]) -> int:
        if not failed:
            return 0
        with self._tx() as db:
            changed = 0
            for fp, token, cls, reason in failed:
                cur = db.execute(
                    "UPDATE requests SET state=4, owner=NULL, lease_expires=NULL, fail_cls=?, fail_reason=? "
                    "WHERE job=? AND fp=? AND token=? AND state IN (0, 1, 2)",
                    (cls, reason, self.job, fp, token),
                )
                changed += cur.rowcount
            return changed

    def release(self, worker: str, fingerprints: Sequence[str] | None = None) -> int:
        with self._tx() as db:
            if fingerprints is None:
                cur = db.execute(
                    "UPDATE requests SET state=0, owner=NULL, lease_expires=NULL WHERE job=? AND state=2 AND owner=?",
                    (self.job, worker),
                )
                return cur.rowcount
            n = 0
            for fp in fingerprints:
                n += db.execute(
                    "UPDATE requests SET state=0, owner=NULL, lease_expires=NULL "
                    "WHERE job=? AND fp=? AND state=2 AND owner=?",
                    (self.job, fp, worker),
                ).rowcount
            return n

    def reclaim(self, worker: str | None = None) -> int:
        now = self.clock()
        with self._tx() as db:
            n = db.execute(
                "UPDATE requests SET state=0, owner=NULL, lease_expires=NULL "
                "WHERE job=? AND state=2 AND lease_expires<?",
                (self.job, now),
            ).rowcount
            if worker is not None:
                n += db.execute(
                    "UPDATE requests SET state=0, owner=NULL, lease_expires=NULL WHERE job=? AND state=2 AND owner=?",
                    (self.job, worker),
                ).rowcount
            return n

    def dead_letter(self, fingerprint: str, reason: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO dead (job, fp, reason, data, at) "
                "SELECT job, fp, ?, data, ? FROM requests WHERE job=? AND fp=?",
                (reason, self.clock(), self.job, fingerprint),
            )
            db.execute("DELETE FROM requests WHERE job=? AND fp=?", (self.job, fingerprint))

    def dead_letter_count(self) -> int:
        (n,) = self.db.execute("SELECT COUNT(*) FROM dead WHERE job=?", (self.job,)).fetchone()
        return int(n)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self.db.execute(
            "SELECT fp, reason, data, at FROM dead WHERE job=? ORDER BY at LIMIT ?", (self.job, limit)
        ).fetchall()
        return [DeadLetter(*r) for r in rows]

    # ---- observation -------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(COUNT_KEYS, 0)
        rows = self.db.execute("SELECT state, n FROM counts WHERE job=?", (self.job,)).fetchall()
        raw = {STATE_NAMES.get(state, f"state {str(state)[:20]}"): n for state, n in rows}
        for k, n in read_back.counts(self.job, raw).items():
            if k in out:  # a state the frontier does not write: not counted
                out[k] = int(n)
        return out

    def next_eligible_at(self) -> float | None:
        (t,) = self.db.execute("SELECT MIN(eligible_at) FROM requests WHERE job=? AND state=1", (self.job,)).fetchone()
        return read_back.eligible_time(self.job, t, self.clock())

    def status(self) -> Status:
        db = self.db
        now = self.clock()
        by_cls = dict(
            db.execute(
                "SELECT fail_cls, COUNT(*) FROM requests WHERE job=? AND state=4 GROUP BY fail_cls", (self.job,)
            ).fetchall()
        )
        (oldest,) = db.execute("SELECT MIN(eligible_at) FROM requests WHERE job=? AND state=0", (self.job,)).fetchone()
        wait_sum, wait_n = db.execute("SELECT wait_sum, wait_n FROM jobs WHERE job=?", (self.job,)).fetchone()
        leases = dict(
            db.execute(
                "SELECT owner, COUNT(*) FROM requests WHERE job=? AND state=2 AND lease_expires>=? GROUP BY owner",
                (self.job, now),
            ).fetchall()
        )
        (dead,) = db.execute("SELECT COUNT(*) FROM dead WHERE job=?", (self.job,)).fetchone()
        beats = db.execute("SELECT worker, at, until FROM beats WHERE job=?", (self.job,)).fetchall()
        retries, last = db.execute(
            "SELECT COALESCE(SUM(attempts > 0), 0), MAX(eligible_at) FROM requests WHERE job=? AND state=1",
            (self.job,),
        ).fetchone()
        # every value read back checked (read_back): a column of another type than the
        # schema's (SQLite keeps what it is given) is skipped with one warning
        sums = read_back.counts(self.job, {"wait_sum": wait_sum, "wait_n": wait_n}, floats=("wait_sum",))
        oldest = read_back.eligible_time(self.job, oldest, now)
        wait_n = int(sums.get("wait_n", 0))
        return Status(
            job=self.job,
            run=self._run(self._current_run_id()),
            counts=self.counts(),
            failed_by_class={str(k): int(v) for k, v in read_back.counts(self.job, by_cls).items()},
            oldest_pending_age=None if oldest is None else max(0.0, now - oldest),
            average_wait=(sums.get("wait_sum", 0.0) / wait_n) if wait_n and "wait_sum" in sums else None,
            leases_by_worker={str(k): int(v) for k, v in leases.items()},
            dead_letters=int(dead),
            workers=checked_beats(beats, now),
            delayed_retries=int(retries or 0),
            last_eligible_at=read_back.eligible_time(self.job, last, now),
        )

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        cur = self.db.execute(
            "SELECT fp, state, data, domain, priority, attempts, eligible_at, enqueued_at, fail_cls, fail_reason, "
            "owner, lease_expires, token FROM requests WHERE job=? AND fp=?",
            (self.job, fingerprint),
        )
        row = cur.fetchone()
        if row is None:
            return None
        d = dict(zip([c[0] for c in cur.description], row, strict=True))
        d["fingerprint"] = d.pop("fp")
        if d["state"] not in PUBLIC_STATES:  # another program wrote it: not shown, one warning
            read_back.unreadable_record(
                self.job, fingerprint, f"state {str(d['state'])[:20]!r} is none the frontier writes"
            )
            return None
        d["state"] = PUBLIC_STATES[d["state"]]
        cls, reason = d.pop("fail_cls"), d.pop("fail_reason")
        d["last_failure"] = (cls, reason or "") if cls else None
        return d

    def known_jobs(self) -> list[str]:
        rows = self.db.execute("SELECT DISTINCT job FROM runs ORDER BY job").fetchall()
        return [str(r[0]) for r in rows]

    # ---- commands ----------------------------------------------------------------------

    def reset(self) -> None:
        with self._tx() as db:
            self._wipe(db)
            db.execute("DELETE FROM workers WHERE job=?", (self.job,))
            db.execute("DELETE FROM beats WHERE job=?", (self.job,))
            # a run marker that is no run number (another program wrote it) is forgotten too
            db.execute("UPDATE jobs SET current_run=NULL WHERE job=? AND typeof(current_run)!='integer'", (self.job,))
            info = self._run(self._current_run_id())
            if info is not None and info.ended_at is None:
                db.execute(
                    "UPDATE runs SET ended_at=?, counts=? WHERE job=? AND run_id=?",
                    (self.clock(), json.dumps({"reset": 1}), self.job, info.run_id),
                )

    def resolve(self, fingerprints: Sequence[str]) -> int:
        if not fingerprints:
            return 0
        with self._tx() as db:
            return sum(
                db.execute(
                    "UPDATE requests SET state=3, data='', domain='', owner=NULL, lease_expires=NULL, "
                    "fail_cls=NULL, fail_reason=NULL "
                    "WHERE job=? AND fp=? AND state=4",
                    (self.job, fp),
                ).rowcount
                for fp in fingerprints
            )

    def requeue(self, cls: str | None = None) -> int:
        now = self.clock()
        with self._tx() as db:
            where = "job=? AND state=4" + (" AND fail_cls=?" if cls is not None else "")
            args: tuple[Any, ...] = (self.job,) + ((cls,) if cls is not None else ())
            (k,) = db.execute(f"SELECT COUNT(*) FROM requests WHERE {where}", args).fetchone()  # noqa: S608
            if not k:
                return 0
            seq = self._next_seq(db, k)
            n = db.execute(
                f"UPDATE requests SET state=0, attempts=0, eligible_at=?, seq=?, token=token+1 "  # noqa: S608
                f"WHERE {where}",
                (now, -seq) + args,  # behind the queue's other requests, as on Redis
            ).rowcount
        self.reopen_run()
        return n
