"""The SQLite frontier's leases (:class:`SqliteLeases`): lease in order (due delayed
records first, fair shares of the domains within a priority), and every change of the
records a worker or a command hands back (:meth:`SqliteLeases.settle`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from scrapy_scale.frontier.backends.ordering import fair_shares, interleave
from scrapy_scale.frontier.backends.sqlite.file import SqliteFile
from scrapy_scale.frontier.backends.sqlite.schema import unreadable
from scrapy_scale.frontier.store import Leased, Settle, Settled

#: the records' columns a lease gives up (back to pending, done, failed)
_UNLEASE = "owner=NULL, lease_expires=NULL"
#: where a record is still pending or leased (an ack or fail with its token counts)
_OPEN = "state IN (0, 1, 2)"


class SqliteLeases:
    """Leases of one job's records, in the store's file."""

    def __init__(self, file: SqliteFile):
        self.file = file
        self.job = file.job

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
        seq = self.file.next_seq(db, len(ids))
        db.executemany(
            "UPDATE requests SET state=0, seq=? WHERE id=?", [(seq + i, rid) for i, (rid,) in enumerate(ids)]
        )

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        now = self.file.clock()
        with self.file.tx() as db:
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
                self._dead(db, r[1], reason)
                out.append(Leased(r[1], "", domain, prio, 0, 0.0, 0.0, 0, error=reason))
                continue
            out.append(
                Leased(r[1], r[2], domain, prio, r[3], r[4], r[5], r[6] + 1, (r[7], r[8] or "") if r[7] else None)
            )
        return out

    def settle(self, worker: str | None, change: Settle, rows: Sequence[Settled] | None, seconds: float = 0.0) -> int:
        now = self.file.clock()
        with self.file.tx() as db:
            if change is Settle.RECLAIMED:
                n = db.execute(
                    f"UPDATE requests SET state=0, {_UNLEASE} WHERE job=? AND state=2 AND lease_expires<?",  # noqa: S608
                    (self.job, now),
                ).rowcount
                return n + (self._own(db, worker, "state=0", rows) if worker is not None else 0)
            if change is Settle.RELEASED:
                return self._own(db, worker, "state=0", rows)
            if change is Settle.RENEWED:
                return self._own(db, worker, "lease_expires=?", rows, (now + seconds,), unlease=False)
            n = 0
            for r in rows or ():
                if change is Settle.DEAD:
                    self._dead(db, r.fingerprint, r.reason)
                    continue
                n += db.execute(*self._one(change, r)).rowcount
            return n

    def _one(self, change: Settle, r: Settled) -> tuple[str, tuple[object, ...]]:
        """The statement that settles one record (DONE, FAILED, RESOLVED)."""
        if change is Settle.DONE:
            # done: the request itself is no longer needed (dedup and status keep the row)
            return (
                f"UPDATE requests SET state=3, data='', domain='', {_UNLEASE} "  # noqa: S608
                f"WHERE job=? AND fp=? AND token=? AND {_OPEN}",
                (self.job, r.fingerprint, r.token),
            )
        if change is Settle.FAILED:
            return (
                f"UPDATE requests SET state=4, {_UNLEASE}, fail_cls=?, fail_reason=? "  # noqa: S608
                f"WHERE job=? AND fp=? AND token=? AND {_OPEN}",
                (r.cls, r.reason, self.job, r.fingerprint, r.token),
            )
        return (
            f"UPDATE requests SET state=3, data='', domain='', {_UNLEASE}, "  # noqa: S608
            "fail_cls=NULL, fail_reason=NULL WHERE job=? AND fp=? AND state=4",
            (self.job, r.fingerprint),
        )

    def _own(
        self,
        db: sqlite3.Connection,
        worker: str | None,
        sets: str,
        rows: Sequence[Settled] | None,
        args: tuple[object, ...] = (),
        unlease: bool = True,
    ) -> int:
        """``UPDATE ... SET sets`` of ``worker``'s leases: those listed, or all of them."""
        update = f"UPDATE requests SET {sets}" + (f", {_UNLEASE}" if unlease else "")
        if rows is None:
            return db.execute(f"{update} WHERE job=? AND state=2 AND owner=?", (*args, self.job, worker)).rowcount
        return sum(
            db.execute(
                f"{update} WHERE job=? AND fp=? AND state=2 AND owner=?", (*args, self.job, r.fingerprint, worker)
            ).rowcount
            for r in rows
        )

    def _dead(self, db: sqlite3.Connection, fingerprint: str, reason: str) -> None:
        db.execute(
            "INSERT OR REPLACE INTO dead (job, fp, reason, data, at) "
            "SELECT job, fp, ?, data, ? FROM requests WHERE job=? AND fp=?",
            (reason, self.file.clock(), self.job, fingerprint),
        )
        db.execute("DELETE FROM requests WHERE job=? AND fp=?", (self.job, fingerprint))
