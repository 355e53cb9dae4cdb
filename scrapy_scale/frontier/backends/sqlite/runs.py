"""The SQLite frontier's run record and workers tables (:class:`SqliteRuns`): the run's
transitions (begin, finish, reopen, reset), its history, the workers' pids and heartbeats.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable
from typing import Any

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.sqlite.file import SqliteFile
from scrapy_scale.frontier.store import FrontierFatal, RunChange, RunInfo, WorkerTable
from scrapy_scale.shared_values import whole


class SqliteRuns:
    """The runs and workers of one job, in the store's file; ``counts`` reads the records
    by state (a run finishes drained)."""

    def __init__(self, file: SqliteFile, counts: Callable[[], dict[str, int]]):
        self.file = file
        self.job = file.job
        self.counts = counts

    def run(self, run_id: int | None, resumed: bool = False) -> RunInfo | None:
        """Run ``run_id`` read back, checked (None: none, or unreadable)."""
        if run_id is None:
            return None
        row = self.file.db.execute(
            "SELECT run_id, started_at, ended_at, counts FROM runs WHERE job=? AND run_id=?",
            (self.job, run_id),
        ).fetchone()
        if row is None:
            return None
        info = read_back.run_of(
            self.job, row[0], row[1], row[2], read_back.run_counts(self.job, row[3], row[0]), self.file.clock()
        )
        return None if info is None else dataclasses.replace(info, resumed=resumed)

    def _run_kept(self, run_id: int | None) -> RunInfo | None:
        """:meth:`run` for the run's own changes: a row that exists but cannot be read
        (another program wrote it) is taken as unfinished, since now: its records are kept,
        never wiped as those of an ended run."""
        info = self.run(run_id)
        if info is None and run_id is not None:
            row = self.file.db.execute("SELECT 1 FROM runs WHERE job=? AND run_id=?", (self.job, run_id)).fetchone()
            if row is not None:
                return RunInfo(run_id, self.file.clock())
        return info

    def current_run_id(self, strict: bool = False) -> int | None:
        """The job's current run number; one that is no run number (another program wrote
        it) is None with one warning, or with ``strict`` (begin, which would take the
        job as having no run and wipe its records) a :class:`FrontierFatal`."""
        row = self.file.db.execute("SELECT current_run FROM jobs WHERE job=?", (self.job,)).fetchone()
        if not row or row[0] is None:
            return None
        rid = whole(row[0], 1, read_back.MAX_RUN)
        if rid is None and not strict:
            read_back.run_of(self.job, row[0], 0.0, None, {}, self.file.clock())  # its one warning
        elif rid is None:
            raise FrontierFatal(
                f"job {self.job!r}'s run marker (jobs.current_run in {self.file.path}) is {str(row[0])[:30]!r}, "
                "which is no run number a worker writes (another program wrote it): no run can be joined. "
                "Reset the job (`scrapy scale reset`) to start it over"
            )
        return rid

    def change(self, change: RunChange) -> RunInfo | None:
        with self.file.tx() as db:
            if change is RunChange.BEGIN:
                info = self._run_kept(self.current_run_id(strict=True))
                if info is not None and info.ended_at is None:
                    return RunInfo(info.run_id, info.started_at, None, True, {})
                self._wipe(db)
                return self._new_run(db)
            if change is RunChange.RESET:
                self._reset(db)
                return None
            info = self._run_kept(self.current_run_id())
            if change is RunChange.REOPEN:
                if info is None:
                    self._new_run(db)
                elif info.ended_at is not None:
                    db.execute(
                        "UPDATE runs SET ended_at=NULL, counts='{}' WHERE job=? AND run_id=?", (self.job, info.run_id)
                    )
                return None
            return self._finish(db, info)

    def _finish(self, db: sqlite3.Connection, info: RunInfo | None) -> RunInfo | None:
        if info is None or info.ended_at is not None:
            return info
        counts = self.counts()
        if counts["pending"] or counts["delayed"] or counts["leased"]:
            return None
        now = self.file.clock()
        db.execute(
            "UPDATE runs SET ended_at=?, counts=? WHERE job=? AND run_id=?",
            (now, json.dumps(counts), self.job, info.run_id),
        )
        return RunInfo(info.run_id, info.started_at, now, False, counts)

    def _new_run(self, db: sqlite3.Connection) -> RunInfo:
        (last,) = db.execute("SELECT COALESCE(MAX(run_id), 0) FROM runs WHERE job=?", (self.job,)).fetchone()
        now = self.file.clock()
        db.execute("INSERT INTO runs (job, run_id, started_at) VALUES (?, ?, ?)", (self.job, last + 1, now))
        db.execute("UPDATE jobs SET current_run=?, wait_sum=0, wait_n=0 WHERE job=?", (last + 1, self.job))
        db.execute("DELETE FROM beats WHERE job=?", (self.job,))
        return RunInfo(last + 1, now)

    def _wipe(self, db: sqlite3.Connection) -> None:
        for table in ("requests", "counts", "queues", "dead"):
            db.execute(f"DELETE FROM {table} WHERE job=?", (self.job,))  # noqa: S608 - fixed names

    def _reset(self, db: sqlite3.Connection) -> None:
        self._wipe(db)
        db.execute("DELETE FROM workers WHERE job=?", (self.job,))
        db.execute("DELETE FROM beats WHERE job=?", (self.job,))
        # a run marker that is no run number (another program wrote it) is forgotten too
        db.execute("UPDATE jobs SET current_run=NULL WHERE job=? AND typeof(current_run)!='integer'", (self.job,))
        info = self.run(self.current_run_id())
        if info is not None and info.ended_at is None:
            db.execute(
                "UPDATE runs SET ended_at=?, counts=? WHERE job=? AND run_id=?",
                (self.file.clock(), json.dumps({"reset": 1}), self.job, info.run_id),
            )

    def runs(self) -> list[RunInfo]:
        rows = self.file.db.execute(
            "SELECT run_id, started_at, ended_at, counts FROM runs WHERE job=? ORDER BY run_id", (self.job,)
        ).fetchall()
        now = self.file.clock()
        runs = (
            read_back.run_of(self.job, r[0], r[1], r[2], read_back.run_counts(self.job, r[3], r[0]), now) for r in rows
        )
        return [r for r in runs if r is not None]

    def known_jobs(self) -> list[str]:
        rows = self.file.db.execute("SELECT DISTINCT job FROM runs ORDER BY job").fetchall()
        return [str(r[0]) for r in rows]

    # ---- workers ---------------------------------------------------------------------

    def read_workers(self, table: WorkerTable) -> dict[str, Any]:
        db = self.file.db
        if table is WorkerTable.PIDS:
            return {str(w): pid for w, pid in db.execute("SELECT worker, pid FROM workers WHERE job=?", (self.job,))}
        rows = db.execute("SELECT worker, at, until FROM beats WHERE job=?", (self.job,)).fetchall()
        return {str(w): (at, until) for w, at, until in rows}

    def write_worker(self, table: WorkerTable, worker: str, value: float, seen: Any = None) -> bool:
        now = self.file.clock()
        with self.file.tx() as db:
            if table is WorkerTable.BEATS:
                db.execute(
                    "INSERT INTO beats (job, worker, at, until) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (job, worker) DO UPDATE SET at=excluded.at, until=excluded.until",
                    (self.job, worker, now, value),
                )
                return True
            if seen is None:  # a slot no one had: taken unless another process took it meanwhile
                return bool(
                    db.execute(
                        "INSERT INTO workers (job, worker, pid, at) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (job, worker) DO NOTHING",
                        (self.job, worker, int(value), now),
                    ).rowcount
                )
            return bool(
                db.execute(
                    "UPDATE workers SET pid=?, at=? WHERE job=? AND worker=? AND pid IS ?",
                    (int(value), now, self.job, worker, seen),
                ).rowcount
            )
