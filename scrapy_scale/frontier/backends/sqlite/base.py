"""The SQLite frontier's connection, runs and workers (:class:`SqliteBase`); the
records themselves are :class:`.store.SqliteStore`.

One file (WAL, ``synchronous=NORMAL``: survives kill -9) may hold many jobs. Every write
method is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.sqlite.schema import LAYOUT, SCHEMA, STATE_NAMES, Tx
from scrapy_scale.frontier.backends.workers_read import pid_of
from scrapy_scale.frontier.store import FrontierError, FrontierFatal, FrontierStore, RunInfo
from scrapy_scale.shared_values import whole
from scrapy_scale.sqlite_open import setup_retrying, statements


class SqliteBase(FrontierStore):
    """The lifecycle of the file, runs and workers of one job."""

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
            named = {STATE_NAMES.get(k, k): v for k, v in counted.items()}
            found = {STATE_NAMES.get(k, k): v for k, v in real.items()}
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

    def _tx(self) -> Tx:
        return Tx(self.db)

    def batch(self) -> Tx:
        return Tx(self.db)

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
        info = read_back.run_of(
            self.job, row[0], row[1], row[2], read_back.run_counts(self.job, row[3], row[0]), self.clock()
        )
        return None if info is None else dataclasses.replace(info, resumed=resumed)

    def _run_kept(self, run_id: int | None) -> RunInfo | None:
        """:meth:`_run` for the run's own changes: a row that exists but cannot be read
        (another program wrote it) is taken as unfinished, since now: its records are kept,
        never wiped as those of an ended run."""
        info = self._run(run_id)
        if info is None and run_id is not None:
            row = self.db.execute("SELECT 1 FROM runs WHERE job=? AND run_id=?", (self.job, run_id)).fetchone()
            if row is not None:
                return RunInfo(run_id, self.clock())
        return info

    def _current_run_id(self, strict: bool = False) -> int | None:
        """The job's current run number; one that is no run number (another program wrote
        it) is None with one warning, or with ``strict`` (begin_run, which would take the
        job as having no run and wipe its records) a :class:`FrontierFatal`."""
        row = self.db.execute("SELECT current_run FROM jobs WHERE job=?", (self.job,)).fetchone()
        if not row or row[0] is None:
            return None
        rid = whole(row[0], 1, read_back.MAX_RUN)
        if rid is None and not strict:
            read_back.run_of(self.job, row[0], 0.0, None, {}, self.clock())  # its one warning
        elif rid is None:
            raise FrontierFatal(
                f"job {self.job!r}'s run marker (jobs.current_run in {self.path}) is {str(row[0])[:30]!r}, "
                "which is no run number a worker writes (another program wrote it): no run can be joined. "
                "Reset the job (`scrapy scale reset`) to start it over"
            )
        return rid

    def begin_run(self) -> RunInfo:
        with self._tx() as db:
            cur = self._current_run_id(strict=True)
            info = self._run_kept(cur)
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
            info = self._run_kept(self._current_run_id())
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
        now = self.clock()
        runs = (
            read_back.run_of(self.job, r[0], r[1], r[2], read_back.run_counts(self.job, r[3], r[0]), now) for r in rows
        )
        return [r for r in runs if r is not None]

    def reopen_run(self) -> None:
        with self._tx() as db:
            info = self._run_kept(self._current_run_id())
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
                old_pid = None if old is None else pid_of(wid, old)
                if old_pid is None or old_pid == pid or not is_alive(old_pid):
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

    def beats(self) -> dict[str, tuple[Any, Any]]:
        rows = self.db.execute("SELECT worker, at, until FROM beats WHERE job=?", (self.job,)).fetchall()
        return {str(w): (at, until) for w, at, until in rows}

    def _next_seq(self, db: sqlite3.Connection, k: int = 1) -> int:
        (seq,) = db.execute("UPDATE jobs SET seq = seq + ? WHERE job=? RETURNING seq", (k, self.job)).fetchone()
        return int(seq) - k + 1
