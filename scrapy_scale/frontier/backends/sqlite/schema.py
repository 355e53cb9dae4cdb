"""The SQLite frontier's file: its layout (tables, triggers, indexes), the state codes,
one write transaction (:class:`Tx`) and the check of a leased row's fields.

Counters (records by state, per priority-and-domain ready queues) are kept by triggers,
so counting and choosing the next domain never scan the records. Partial indexes keep
each state's lookups small.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from scrapy_scale.frontier.store import State

LAYOUT = 1
#: KiB of page cache of a connection once it seeds in bulk (enqueue_new of 1,000 or more)
SEED_CACHE_KIB = 131072

# internal state codes (delayed is "pending, not yet eligible")
READY, DELAYED, LEASED, DONE, FAILED = 0, 1, 2, 3, 4
STATE_NAMES = {READY: "pending", DELAYED: "delayed", LEASED: "leased", DONE: "done", FAILED: "failed"}
PUBLIC_STATES = {
    READY: State.PENDING,
    DELAYED: State.PENDING,
    LEASED: State.LEASED,
    DONE: State.DONE,
    FAILED: State.FAILED,
}

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

TABLES = {"scale_meta", "jobs", "runs", "requests", "counts", "queues", "dead", "workers", "beats"}


#: (column, index in a _take row, accepted types) of the fields a lease reads
LEASE_FIELDS = (
    ("data", 2, (str,)),
    ("attempts", 3, (int,)),
    ("enqueued_at", 4, (int, float)),
    ("eligible_at", 5, (int, float)),
    ("token", 6, (int,)),
)


def unreadable(row: tuple[Any, ...]) -> str | None:
    """Why a leased row cannot be read (SQLite stores ``'x'`` in an INTEGER column), or None."""
    for name, i, types in LEASE_FIELDS:
        v = row[i]
        if type(v) not in types:
            return f"field {name}={v!r} is not {'text' if types == (str,) else 'a number'}"
    return None


class Tx:
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
