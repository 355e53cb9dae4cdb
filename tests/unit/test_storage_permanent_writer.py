"""Permanent store errors: a row the store refuses for good is isolated and dead-lettered,
a store that can never take a write (schema mismatch, dead letter refused) ends the crawl
loudly instead of retrying forever. Real SQLite files and the MongoDB wire server."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from scrapy_scale.storage.backends import (
    DeadRow,
    Row,
    StoreBroken,
    StoreUnavailable,
    open_store,
    sqlite_error,
)
from scrapy_scale.storage.writer import BatchWriter, DeadLettered, Result, Stored, Submission

pytestmark = pytest.mark.pure


class Collect:
    """Runs a BatchWriter over ``store`` and collects what becomes of each submission."""

    def __init__(self, store):
        self.results: dict[str, Result] = {}
        self.fatal: list[tuple[str, int]] = []
        self.ended = threading.Event()
        self.writer = BatchWriter(store, batch_size=50, max_latency=0.05, retry_max_delay=0.2, on_fatal=self._fatal)

    def _fatal(self, message: str, subs: list[Submission]) -> None:
        self.fatal.append((message, len(subs)))
        self.ended.set()

    def submit(self, key: str, doc: dict) -> None:
        def done(r: Result) -> None:
            self.results[key] = r

        self.writer.submit(
            Submission(
                done=done,
                row=Row(key, doc),
                on_refused=lambda reason: DeadRow("dl-" + key, {"key": key, "reason": reason}),
            )
        )

    def run(self, docs: dict[str, dict]) -> None:
        self.writer.start()
        for k, d in docs.items():
            self.submit(k, d)
        assert self.writer.close(timeout=30), "the writer did not finish: it is looping"


def batch_with_one_poisoned() -> dict[str, dict]:
    docs = {f"k{i}": {"n": i, "v": "fine"} for i in range(5)}
    docs["k2"]["v"] = "poison"
    return docs


def test_sqlite_errors_are_classified() -> None:
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("database is locked")), StoreUnavailable)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("disk I/O error")), StoreUnavailable)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("unable to open database file")), StoreUnavailable)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("no such column: doc")), StoreBroken)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("no such table: items")), StoreBroken)
    for e in (sqlite3.IntegrityError("CHECK constraint failed"), sqlite3.InterfaceError("bad binding")):
        assert sqlite_error("f", e) is e  # about the row: the writer isolates it


def test_sqlite_row_refused_for_good_is_dead_lettered_and_the_rest_stored(tmp_path: Path) -> None:
    path = tmp_path / "items.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("""CREATE TABLE items (key TEXT PRIMARY KEY, doc TEXT NOT NULL
                     CHECK (doc NOT LIKE '%poison%'))""")
    store = open_store(f"sqlite:///{path}", "items")
    store.open()
    col = Collect(store)
    col.run(batch_with_one_poisoned())
    assert not col.fatal
    assert {k for k, r in col.results.items() if isinstance(r, Stored)} == {"k0", "k1", "k3", "k4"}
    bad = col.results["k2"]
    assert isinstance(bad, DeadLettered) and "CHECK constraint failed" in bad.reason
    assert {d["_id"] for d in store.documents()} == {"k0", "k1", "k3", "k4"}
    (dl,) = store.dead_letters()
    assert dl["key"] == "k2" and "IntegrityError" in dl["reason"]
    store.close()


def broken_items_table(path: Path) -> None:
    """Right columns (so the store opens), but every write hits a table that is not there."""
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE items (key TEXT PRIMARY KEY, doc TEXT NOT NULL)")
        c.execute("CREATE TABLE gone (x)")
        c.execute("CREATE TRIGGER audit AFTER INSERT ON items BEGIN INSERT INTO gone VALUES (NEW.key); END")
        c.execute("DROP TABLE gone")


def test_sqlite_schema_error_stops_the_writer_instead_of_looping(tmp_path: Path) -> None:
    path = tmp_path / "items.sqlite"
    broken_items_table(path)
    store = open_store(f"sqlite:///{path}", "items")
    store.open()
    col = Collect(store)
    col.run(batch_with_one_poisoned())
    assert col.ended.is_set() and not col.results
    ((msg, n),) = col.fatal
    assert n == 5 and "no such table: main.gone" in msg and str(path) in msg
    with pytest.raises(StoreBroken):
        col.submit("later", {"n": 1})
    store.close()


def test_dead_letter_refused_for_good_stops_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "items.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE items (key TEXT PRIMARY KEY, doc TEXT NOT NULL CHECK (doc NOT LIKE '%poison%'))")
        c.execute("CREATE TABLE items_dead_letter (id TEXT PRIMARY KEY, doc TEXT NOT NULL CHECK (0), at REAL NOT NULL)")
    store = open_store(f"sqlite:///{path}", "items")
    store.open()
    col = Collect(store)
    col.run(batch_with_one_poisoned())
    ((msg, n),) = col.fatal
    assert "dead letter 'items_dead_letter' refused 1 record(s)" in msg and n == 5
    store.close()
