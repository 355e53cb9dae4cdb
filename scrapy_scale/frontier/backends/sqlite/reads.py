"""What the SQLite frontier reads back (:class:`SqliteReads`): the job's summary (counts,
the next eligible time, status, dead letters) and one record; every value checked
(:mod:`..read_back`): SQLite keeps whatever another program put in a column."""

from __future__ import annotations

from typing import Any

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.sqlite.file import SqliteFile
from scrapy_scale.frontier.backends.sqlite.runs import SqliteRuns
from scrapy_scale.frontier.backends.sqlite.schema import PUBLIC_STATES, STATE_NAMES
from scrapy_scale.frontier.records.workers_read import beats as checked_beats
from scrapy_scale.frontier.store import COUNT_KEYS, DeadLetter, Status, Summary, Want


class SqliteReads:
    """Reads of one job's records, in the store's file."""

    def __init__(self, file: SqliteFile, runs: SqliteRuns):
        self.file = file
        self.runs = runs
        self.job = file.job

    def summary(self, want: Want, limit: int = 100) -> Summary:
        if want is Want.COUNTS:
            return Summary(counts=self.counts())
        if want is Want.NEXT_ELIGIBLE:
            return Summary(next_eligible_at=self.next_eligible_at())
        if want is Want.STATUS:
            return Summary(status=self.status())
        if want is Want.DEAD_LETTERS:
            return Summary(dead_letters=self.dead_letters(limit))
        return Summary(dead_letter_count=self.dead_letter_count())

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(COUNT_KEYS, 0)
        rows = self.file.db.execute("SELECT state, n FROM counts WHERE job=?", (self.job,)).fetchall()
        raw = {STATE_NAMES.get(state, f"state {str(state)[:20]}"): n for state, n in rows}
        for k, n in read_back.counts(self.job, raw).items():
            if k in out:  # a state the frontier does not write: not counted
                out[k] = int(n)
        return out

    def next_eligible_at(self) -> float | None:
        (t,) = self.file.db.execute(
            "SELECT MIN(eligible_at) FROM requests WHERE job=? AND state=1", (self.job,)
        ).fetchone()
        return read_back.eligible_time(self.job, t, self.file.clock())

    def status(self) -> Status:
        db = self.file.db
        now = self.file.clock()
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
            run=self.runs.run(self.runs.current_run_id()),
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
        cur = self.file.db.execute(
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

    def dead_letter_count(self) -> int:
        (n,) = self.file.db.execute("SELECT COUNT(*) FROM dead WHERE job=?", (self.job,)).fetchone()
        return int(n)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self.file.db.execute(
            "SELECT fp, reason, data, at FROM dead WHERE job=? ORDER BY at LIMIT ?", (self.job, limit)
        ).fetchall()
        return [DeadLetter(*r) for r in rows]
