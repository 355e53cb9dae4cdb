"""The SQLite frontier store: one file (WAL), no server, survives kill -9.

One file may hold many jobs. Counters (records by state, per priority-and-domain
ready queues) are kept by triggers, so counting and choosing the next domain
never scan the records. Partial indexes keep each state's lookups small.
Every write method is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.policy import fair_shares, interleave
from scrapy_scale.frontier.store import (
    COUNT_KEYS,
    DeadLetter,
    EnqueueResult,
    FrontierError,
    FrontierStore,
    Leased,
    NewRequest,
    RunInfo,
    State,
    Status,
)
from scrapy_scale.sqlite_open import setup_retrying, statements

LAYOUT = 1
#: KiB of page cache of a connection once it seeds in bulk (enqueue_new of 1,000 or more)
SEED_CACHE_KIB = 131072

# internal state codes (delayed is "pending, not yet eligible")
READY, DELAYED, LEASED, DONE, FAILED = 0, 1, 2, 3, 4
_STATE_NAMES = {READY: "pending", DELAYED: "delayed", LEASED: "leased", DONE: "done", FAILED: "failed"}
_PUBLIC = {READY: State.PENDING, DELAYED: State.PENDING, LEASED: State.LEASED, DONE: State.DONE, FAILED: State.FAILED}

SCHEMA = """
CREATE TABLE IF NOT EXISTS scale_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job TEXT PRIMARY KEY,
    seq INTEGER NOT NULL DEFAULT 0,
    served INTEGER NOT NULL DEFAULT 0,
    current_run INTEGER,
    wait_sum REAL NOT NULL DEFAULT 0,
    wait_n INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS runs (
    job TEXT NOT NULL, run_id INTEGER NOT NULL, started_at REAL NOT NULL, ended_at REAL,
    counts TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (job, run_id)
);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    fp TEXT NOT NULL,
    state INTEGER NOT NULL,
    data TEXT NOT NULL,
    domain TEXT NOT NULL,
    priority INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    eligible_at REAL NOT NULL,
    enqueued_at REAL NOT NULL,
    fail_cls TEXT,
    fail_reason TEXT,
    owner TEXT,
    lease_expires REAL,
    token INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS req_fp ON requests (job, fp);
CREATE INDEX IF NOT EXISTS req_ready ON requests (job, priority, domain, seq) WHERE state = 0;
CREATE INDEX IF NOT EXISTS req_delayed ON requests (job, eligible_at) WHERE state = 1;
CREATE INDEX IF NOT EXISTS req_leased ON requests (job, lease_expires) WHERE state = 2;
CREATE INDEX IF NOT EXISTS req_owner ON requests (job, owner) WHERE state = 2;
CREATE INDEX IF NOT EXISTS req_failed ON requests (job, fail_cls) WHERE state = 4;
CREATE TABLE IF NOT EXISTS counts (
    job TEXT NOT NULL, state INTEGER NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (job, state)
);
CREATE TABLE IF NOT EXISTS queues (
    job TEXT NOT NULL, priority INTEGER NOT NULL, domain TEXT NOT NULL,
    n INTEGER NOT NULL, served INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job, priority, domain)
);
CREATE INDEX IF NOT EXISTS queues_order ON queues (job, priority DESC, served);
CREATE TABLE IF NOT EXISTS dead (
    job TEXT NOT NULL, fp TEXT NOT NULL, reason TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (job, fp)
);
CREATE TABLE IF NOT EXISTS workers (
    job TEXT NOT NULL, worker TEXT NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (job, worker)
);
CREATE TABLE IF NOT EXISTS beats (
    job TEXT NOT NULL, worker TEXT NOT NULL, at REAL NOT NULL, until REAL NOT NULL,
    PRIMARY KEY (job, worker)
);

CREATE TRIGGER IF NOT EXISTS req_ins AFTER INSERT ON requests BEGIN
    INSERT INTO counts (job, state, n) VALUES (NEW.job, NEW.state, 1)
        ON CONFLICT (job, state) DO UPDATE SET n = n + 1;
    INSERT INTO queues (job, priority, domain, n) SELECT NEW.job, NEW.priority, NEW.domain, 1
        WHERE NEW.state = 0
        ON CONFLICT (job, priority, domain) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS req_del AFTER DELETE ON requests BEGIN
    UPDATE counts SET n = n - 1 WHERE job = OLD.job AND state = OLD.state;
    UPDATE queues SET n = n - 1
        WHERE OLD.state = 0 AND job = OLD.job AND priority = OLD.priority AND domain = OLD.domain;
    DELETE FROM queues WHERE job = OLD.job AND priority = OLD.priority AND domain = OLD.domain AND n <= 0;
END;
CREATE TRIGGER IF NOT EXISTS req_upd AFTER UPDATE OF state, priority, domain ON requests
WHEN OLD.state <> NEW.state OR OLD.priority <> NEW.priority OR OLD.domain <> NEW.domain BEGIN
    UPDATE counts SET n = n - 1 WHERE job = OLD.job AND state = OLD.state;
    INSERT INTO counts (job, state, n) VALUES (NEW.job, NEW.state, 1)
        ON CONFLICT (job, state) DO UPDATE SET n = n + 1;
    UPDATE queues SET n = n - 1
        WHERE OLD.state = 0 AND job = OLD.job AND priority = OLD.priority AND domain = OLD.domain;
    DELETE FROM queues WHERE job = OLD.job AND priority = OLD.priority AND domain = OLD.domain AND n <= 0;
    INSERT INTO queues (job, priority, domain, n) SELECT NEW.job, NEW.priority, NEW.domain, 1
        WHERE NEW.state = 0
        ON CONFLICT (job, priority, domain) DO UPDATE SET n = n + 1;
END;
"""

_TABLES = {"scale_meta", "jobs", "runs", "requests", "counts", "queues", "dead", "workers", "beats"}


class SqliteStore(FrontierStore):
    schemes = ("sqlite",)

    def __init__(self, path: str, job: str, clock: clock_mod.Clock = clock_mod.wall):
        super().__init__(job, clock)
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._seed_cache = False  # SEED_CACHE_KIB set on this connection

    @staticmethod
    def path_from_url(url: str, state_dir: str = ".scale") -> str:
        """``sqlite:///abs.db`` and ``sqlite:////abs.db`` -> ``/abs.db``;
        ``sqlite://rel/f.db`` -> ``rel/f.db``; ``sqlite://`` -> ``{state_dir}/frontier.db``."""
        parts = urlsplit(url)
        path = (parts.netloc or "") + parts.path
        if path in ("", "/"):
            return os.path.join(state_dir, "frontier.db")
        if path.startswith("//"):  # sqlite:////abs/path
            path = path[1:]
        return path

    # ---- lifecycle -----------------------------------------------------------------

    def open(self) -> None:
        if self._db is not None:
            return
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise FrontierError(
                f"cannot open the SQLite frontier {self.path!r}: {e}; check the folder exists and "
                "is writable, or set SCALE_FRONTIER_URL / SCALE_STATE_DIR"
            ) from None
        try:
            setup_retrying(db, self._setup, 60)
        except FrontierError:
            db.close()
            raise
        except sqlite3.DatabaseError as e:
            db.close()
            if "malformed" in str(e) or "corrupt" in str(e):
                raise FrontierError(self.corrupt_message(str(e))) from None
            raise FrontierError(
                f"{self.path!r} is not a usable scrapy-scale frontier ({e}); move the file away "
                "or point SCALE_FRONTIER_URL at another file"
            ) from None
        self._db = db

    def _setup(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=60000")
        # one write transaction from the layout check to the layout row, so a process opening
        # the file at the same moment sees either no tables or a whole frontier
        db.execute("BEGIN IMMEDIATE")
        existing = self._check_layout(db)
        if existing:
            self._check_intact(db)
        for statement in statements(SCHEMA):
            db.execute(statement)
        db.execute("INSERT OR IGNORE INTO scale_meta (key, value) VALUES ('layout', ?)", (str(LAYOUT),))
        db.execute("INSERT OR IGNORE INTO jobs (job) VALUES (?)", (self.job,))
        db.execute("COMMIT")

    def _check_layout(self, db: sqlite3.Connection) -> bool:
        """Refuse a file of another program or layout; True when it is an existing frontier."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return False
        if "scale_meta" not in tables:
            raise FrontierError(
                f"{self.path!r} is a SQLite file of another program (tables: {', '.join(sorted(tables))}); "
                "point SCALE_FRONTIER_URL at another file or move this one away"
            )
        row = db.execute("SELECT value FROM scale_meta WHERE key='layout'").fetchone()
        if row is None or row[0] != str(LAYOUT):
            found = row[0] if row else "none"
            raise FrontierError(
                f"the frontier file {self.path!r} has layout {found}, this version of scrapy-scale "
                f"reads layout {LAYOUT}; finish or drop that job with the version that wrote it, "
                "or move the file away to start over"
            )
        return True

    def _check_intact(self, db: sqlite3.Connection) -> None:
        """A corrupt file (garbled pages) or counters that disagree with the records would
        hang the crawl later (leases that never come, a job that never drains): refuse it now."""
        problems = [r[0] for r in db.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise FrontierError(self.corrupt_message("; ".join(str(p) for p in problems)[:300]))
        counted = {st: n for st, n in db.execute("SELECT state, n FROM counts WHERE job=?", (self.job,)) if n}
        real = dict(db.execute("SELECT state, COUNT(*) FROM requests WHERE job=? GROUP BY state", (self.job,)))
        if counted != real:
            named = {_STATE_NAMES.get(k, k): v for k, v in counted.items()}
            found = {_STATE_NAMES.get(k, k): v for k, v in real.items()}
            raise FrontierError(
                self.corrupt_message(
                    f"inconsistent: the counters say {named}, the records are {found} (job {self.job!r})"
                )
            )

    def corrupt_message(self, problem: str) -> str:
        return (
            f"the SQLite frontier {self.path!r} is corrupt ({problem}); the crawl cannot use it. "
            f"Check it with `sqlite3 {self.path} 'PRAGMA integrity_check'`, then restore it from a backup, "
            "or salvage what sqlite3's `.recover` can into a new file, or move it away to start the job over "
            "(its records are lost)"
        )

    def fatal_error(self, error: BaseException) -> str | None:
        # a DatabaseError other than an OperationalError (busy, locked, disk full, I/O, which
        # may pass): malformed or not a database, corrupt; retrying can never help
        if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
            return self.corrupt_message(f"{type(error).__name__}: {error}")
        return super().fatal_error(error)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
            self._seed_cache = False

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise FrontierError("the SQLite frontier is not open")
        return self._db

    def _tx(self) -> _Tx:
        return _Tx(self.db)

    def batch(self) -> _Tx:
        return _Tx(self.db)

    # ---- runs ------------------------------------------------------------------------

    def _run(self, run_id: int | None, resumed: bool = False) -> RunInfo | None:
        if run_id is None:
            return None
        row = self.db.execute(
            "SELECT run_id, started_at, ended_at, counts FROM runs WHERE job=? AND run_id=?",
            (self.job, run_id),
        ).fetchone()
        if row is None:
            return None
        return RunInfo(row[0], row[1], row[2], resumed, json.loads(row[3]))

    def _current_run_id(self) -> int | None:
        row = self.db.execute("SELECT current_run FROM jobs WHERE job=?", (self.job,)).fetchone()
        return row[0] if row else None

    def begin_run(self) -> RunInfo:
        with self._tx() as db:
            cur = self._current_run_id()
            info = self._run(cur)
            if info is not None and info.ended_at is None:
                return RunInfo(info.run_id, info.started_at, None, True, {})
            self._wipe(db)
            return self._new_run(db)

    def _new_run(self, db: sqlite3.Connection) -> RunInfo:
        (last,) = db.execute("SELECT COALESCE(MAX(run_id), 0) FROM runs WHERE job=?", (self.job,)).fetchone()
        now = self.clock()
        db.execute("INSERT INTO runs (job, run_id, started_at) VALUES (?, ?, ?)", (self.job, last + 1, now))
        db.execute("UPDATE jobs SET current_run=?, wait_sum=0, wait_n=0 WHERE job=?", (last + 1, self.job))
        db.execute("DELETE FROM beats WHERE job=?", (self.job,))
        return RunInfo(last + 1, now)

    def _wipe(self, db: sqlite3.Connection) -> None:
        for table in ("requests", "counts", "queues", "dead"):
            db.execute(f"DELETE FROM {table} WHERE job=?", (self.job,))  # noqa: S608 - fixed names

    def finish_run(self) -> RunInfo | None:
        with self._tx() as db:
            info = self._run(self._current_run_id())
            if info is None:
                return None
            if info.ended_at is not None:
                return info
            counts = self.counts()
            if counts["pending"] or counts["delayed"] or counts["leased"]:
                return None
            now = self.clock()
            db.execute(
                "UPDATE runs SET ended_at=?, counts=? WHERE job=? AND run_id=?",
                (now, json.dumps(counts), self.job, info.run_id),
            )
            return RunInfo(info.run_id, info.started_at, now, False, counts)

    def runs(self) -> list[RunInfo]:
        rows = self.db.execute(
            "SELECT run_id, started_at, ended_at, counts FROM runs WHERE job=? ORDER BY run_id", (self.job,)
        ).fetchall()
        return [RunInfo(r[0], r[1], r[2], False, json.loads(r[3])) for r in rows]

    def reopen_run(self) -> None:
        with self._tx() as db:
            info = self._run(self._current_run_id())
            if info is None:
                self._new_run(db)
            elif info.ended_at is not None:
                db.execute(
                    "UPDATE runs SET ended_at=NULL, counts='{}' WHERE job=? AND run_id=?", (self.job, info.run_id)
                )

    # ---- workers ---------------------------------------------------------------------

    def claim_worker(self, prefix: str, pid: int, is_alive: Callable[[int], bool]) -> str:
        with self._tx() as db:
            rows = dict(
                db.execute(
                    "SELECT worker, pid FROM workers WHERE job=? AND worker LIKE ?", (self.job, prefix + "/%")
                ).fetchall()
            )
            slot = 0
            while True:
                wid = f"{prefix}/{slot}"
                old = rows.get(wid)
                if old is None or old == pid or not is_alive(old):
                    db.execute(
                        "INSERT INTO workers (job, worker, pid, at) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (job, worker) DO UPDATE SET pid=excluded.pid, at=excluded.at",
                        (self.job, wid, pid, self.clock()),
                    )
                    return wid
                slot += 1

    def heartbeat(self, worker: str, until: float) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO beats (job, worker, at, until) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (job, worker) DO UPDATE SET at=excluded.at, until=excluded.until",
                (self.job, worker, self.clock(), until),
            )

    # ---- hot path ----------------------------------------------------------------------

    def _next_seq(self, db: sqlite3.Connection, k: int = 1) -> int:
        (seq,) = db.execute("UPDATE jobs SET seq = seq + ? WHERE job=? RETURNING seq", (k, self.job)).fetchone()
        return int(seq) - k + 1

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        if not requests:
            return []
        out: list[EnqueueResult] = []
        now = self.clock()
        with self._tx() as db:
            seq = self._next_seq(db, len(requests))
            for i, r in enumerate(requests):
                out.append(self._enqueue_one(db, r, now, seq + i))
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
                [(job, r.fingerprint, r.data, r.domain, r.priority, now, now, seq + i) for i, r in enumerate(requests)],
            )
            return int(cur.rowcount)

    def _enqueue_one(self, db: sqlite3.Connection, r: NewRequest, now: float, seq: int) -> EnqueueResult:
        row = db.execute("SELECT id, state FROM requests WHERE job=? AND fp=?", (self.job, r.fingerprint)).fetchone()
        if row is not None and r.reopen and r.again and row[1] not in (DONE, FAILED):
            # dont_filter while the record is pending or leased: a record of its own
            r = dataclasses.replace(r, fingerprint=r.again, reopen=False, again="")
            row = db.execute(
                "SELECT id, state FROM requests WHERE job=? AND fp=?", (self.job, r.fingerprint)
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
        rid, old_state = row
        if r.held_by:
            return EnqueueResult.DUPLICATE
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
        db.execute("UPDATE requests SET state=0 WHERE job=? AND state=1 AND eligible_at<=?", (self.job, now))

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
            "FROM requests WHERE job=? AND state=0 AND priority=? AND domain=? ORDER BY seq LIMIT ?",
            (self.job, prio, domain, k),
        ).fetchall()
        bad = {r[0]: why for r in rows if (why := _unreadable(r))}
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
                    "UPDATE requests SET state=3, owner=NULL, lease_expires=NULL "
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
        for state, n in self.db.execute("SELECT state, n FROM counts WHERE job=?", (self.job,)):
            out[_STATE_NAMES[state]] = n
        return out

    def next_eligible_at(self) -> float | None:
        (t,) = self.db.execute("SELECT MIN(eligible_at) FROM requests WHERE job=? AND state=1", (self.job,)).fetchone()
        return t

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
        return Status(
            job=self.job,
            run=self._run(self._current_run_id()),
            counts=self.counts(),
            failed_by_class={str(k): v for k, v in by_cls.items()},
            oldest_pending_age=None if oldest is None else max(0.0, now - oldest),
            average_wait=(wait_sum / wait_n) if wait_n else None,
            leases_by_worker={str(k): v for k, v in leases.items()},
            dead_letters=dead,
            workers={str(w): (float(at), float(until)) for w, at, until in beats},
            delayed_retries=int(retries),
            last_eligible_at=None if last is None else float(last),
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
        d["state"] = _PUBLIC[d["state"]]
        cls, reason = d.pop("fail_cls"), d.pop("fail_reason")
        d["last_failure"] = (cls, reason or "") if cls else None
        return d

    # ---- commands ----------------------------------------------------------------------

    def reset(self) -> None:
        with self._tx() as db:
            self._wipe(db)
            db.execute("DELETE FROM workers WHERE job=?", (self.job,))
            db.execute("DELETE FROM beats WHERE job=?", (self.job,))
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
                    "UPDATE requests SET state=3, owner=NULL, lease_expires=NULL, fail_cls=NULL, fail_reason=NULL "
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
                (now, seq) + args,
            ).rowcount
        self.reopen_run()
        return n


#: (column, index in a _take row, accepted types) of the fields a lease reads
_LEASE_FIELDS = (
    ("data", 2, (str,)),
    ("attempts", 3, (int,)),
    ("enqueued_at", 4, (int, float)),
    ("eligible_at", 5, (int, float)),
    ("token", 6, (int,)),
)


def _unreadable(row: tuple[Any, ...]) -> str | None:
    """Why a leased row cannot be read (SQLite stores ``'x'`` in an INTEGER column), or None."""
    for name, i, types in _LEASE_FIELDS:
        v = row[i]
        if type(v) not in types:
            return f"field {name}={v!r} is not {'text' if types == (str,) else 'a number'}"
    return None


class _Tx:
    """``with`` block = one BEGIN IMMEDIATE transaction (rolled back on error)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.nested = db.in_transaction

    def __enter__(self) -> sqlite3.Connection:
        if not self.nested:
            self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.nested:
            return
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error as e:
                # a COMMIT that failed (disk full) leaves the transaction open: every later
                # block would then nest in it and never commit. Roll back, then fail.
                self._rollback(e)
                raise
        self._rollback(exc)

    def _rollback(self, error: object) -> None:
        if self.db.in_transaction:  # SQLite may have rolled back by itself (SQLITE_FULL)
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        if isinstance(error, sqlite3.OperationalError) and "full" in str(error):
            # give the space of the write-ahead log back (it only grows between checkpoints)
            try:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass
