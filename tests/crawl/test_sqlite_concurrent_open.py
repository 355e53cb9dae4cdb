"""Workers started together on one SQLite file: each open succeeds (the first open of a
new file used to fail with "database is locked" in about a third of 4-process starts, and
a worker of tests/crawl/test_distributed.py exited at startup in CI)."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

import pytest

from scrapy_scale.sqlite_open import setup_retrying

pytestmark = pytest.mark.crawl  # it starts processes

ROUNDS = 12
PROCS = 4


def _open(kind: str, path: str, barrier) -> str:
    barrier.wait()
    try:
        if kind == "store":
            from scrapy_scale.storage.backends import SQLiteStore

            SQLiteStore(f"sqlite:///{path}", "items", "items_dead").open()
        elif kind == "frontier":
            from scrapy_scale.frontier.backends.sqlite import SqliteStore

            SqliteStore(path, "job").open()
        elif kind == "throttle":
            from scrapy_scale.throttle.shared import SqliteShared

            SqliteShared(path, "job")
        else:
            from scrapy_scale.egress.shared import SqliteState

            SqliteState(path, "job")
        return "ok"
    except Exception as e:  # reported to the test, which shows it
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("kind", ["store", "frontier", "throttle", "egress"])
def test_processes_opening_one_new_sqlite_file_at_once_all_succeed(tmp_path: Path, kind: str) -> None:
    ctx = mp.get_context("fork")
    failures = []
    with ctx.Manager() as manager, ctx.Pool(PROCS) as pool:
        for i in range(ROUNDS):
            barrier = manager.Barrier(PROCS)
            path = str(tmp_path / f"r{i}" / "state.sqlite")
            results = pool.starmap(_open, [(kind, path, barrier)] * PROCS)
            failures += [r for r in results if r != "ok"]
    assert not failures, failures[:3]


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_setup_is_run_again_while_locked_then_gives_up_at_the_timeout() -> None:
    clock = FakeClock()
    db = sqlite3.connect(":memory:")
    calls = []

    def locked(_db: sqlite3.Connection) -> None:
        calls.append(clock.t)
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        setup_retrying(db, locked, 5.0, clock=clock, sleep=clock.sleep)
    assert len(calls) > 5 and clock.t >= 5.0
    assert clock.t < 6.0, "the pauses stay short (at most 0.75 s)"

    def other(_db: sqlite3.Connection) -> None:
        calls.append(clock.t)
        raise sqlite3.OperationalError("no such table: x")

    calls.clear()
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        setup_retrying(db, other, 5.0, clock=clock, sleep=clock.sleep)
    assert len(calls) == 1, "an error that is not a lock is not retried"

    attempts = iter([True, True, False])

    def twice(_db: sqlite3.Connection) -> None:
        if next(attempts):
            raise sqlite3.OperationalError("database is locked")

    setup_retrying(db, twice, 5.0, clock=clock, sleep=clock.sleep)
