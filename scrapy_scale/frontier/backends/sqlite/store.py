"""The SQLite frontier store: one file (WAL), no server, survives kill -9.

:class:`SqliteStore` is the store contract (:class:`~scrapy_scale.frontier.store.FrontierStore`)
over units it owns, each its own concern: the file (:mod:`.file`: connection, layout,
transactions), the run record and workers tables (:mod:`.runs`), the writes of records
(:mod:`.records`), leases and what is handed back (:mod:`.leases`), and the reads
(:mod:`.reads`). The file's layout is :mod:`.schema`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.backends.sqlite.file import SqliteFile
from scrapy_scale.frontier.backends.sqlite.leases import SqliteLeases
from scrapy_scale.frontier.backends.sqlite.reads import SqliteReads
from scrapy_scale.frontier.backends.sqlite.records import SqliteRecords
from scrapy_scale.frontier.backends.sqlite.runs import SqliteRuns
from scrapy_scale.frontier.backends.sqlite.schema import Tx
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


class SqliteStore(FrontierStore):
    schemes = ("sqlite",)

    def __init__(self, path: str, job: str, clock: clock_mod.Clock = clock_mod.wall):
        self.file = SqliteFile(path, job, clock)
        super().__init__(job, clock)
        self.run_record = SqliteRuns(self.file, self.counts)
        self.records = SqliteRecords(self.file)
        self.leases = SqliteLeases(self.file)
        self.reads = SqliteReads(self.file, self.run_record)

    path_from_url = staticmethod(SqliteFile.path_from_url)

    @property  # type: ignore[override]
    def clock(self) -> clock_mod.Clock:
        """The store's clock, the one its units read (a test may set another)."""
        return self.file.clock

    @clock.setter
    def clock(self, clock: clock_mod.Clock) -> None:
        self.file.clock = clock

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def db(self) -> sqlite3.Connection:
        """The open connection (raises :class:`FrontierError` when closed)."""
        return self.file.db

    # ---- the contract ----------------------------------------------------------------

    def open(self) -> None:
        self.file.open()

    def close(self) -> None:
        self.file.close()

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
        return self.leases.lease(worker, n, seconds)

    def settle(self, worker: str | None, change: Settle, rows: Sequence[Settled] | None, seconds: float = 0.0) -> int:
        return self.leases.settle(worker, change, rows, seconds)

    def summary(self, want: Want, limit: int = 100) -> Summary:
        return self.reads.summary(want, limit)

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        return self.reads.get(fingerprint)

    def requeue_failed(self, cls: str | None) -> int:
        return self.records.requeue_failed(cls)

    # ---- optional ----------------------------------------------------------------------

    def fatal_error(self, error: BaseException) -> str | None:
        return self.file.fatal_error(error) or super().fatal_error(error)

    def batch(self) -> Tx:
        return self.file.tx()

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        return self.records.enqueue_new(requests)

    def known_jobs(self) -> list[str]:
        return self.run_record.known_jobs()
