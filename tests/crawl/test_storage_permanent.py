"""Permanent store errors: a row the store refuses for good is isolated and dead-lettered,
a store that can never take a write (schema mismatch, dead letter refused) ends the crawl
loudly instead of retrying forever. Real SQLite files and the MongoDB wire server."""

from __future__ import annotations

import os
import signal
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
from scrapy_scale.testbed import Testbed
from tests.crawl.test_storage_crawl import kill_store_once_stored
from tests.support.crawling import run_crawl, start_crawl

ONLY_STORE = {
    "ITEM_PIPELINES": {"scrapy_scale.storage.StorePipeline": 900},
    "SPIDER_MIDDLEWARES": {"scrapy_scale.storage.StoreSpiderMiddleware": 50},
}


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


@pytest.mark.pure
def test_sqlite_errors_are_classified() -> None:
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("database is locked")), StoreUnavailable)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("disk I/O error")), StoreUnavailable)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("unable to open database file")), StoreUnavailable)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("no such column: doc")), StoreBroken)
    assert isinstance(sqlite_error("f", sqlite3.OperationalError("no such table: items")), StoreBroken)
    for e in (sqlite3.IntegrityError("CHECK constraint failed"), sqlite3.InterfaceError("bad binding")):
        assert sqlite_error("f", e) is e  # about the row: the writer isolates it


@pytest.mark.pure
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


@pytest.mark.crawl
def test_mongodb_row_refused_for_good_is_dead_lettered_and_the_rest_stored(mongo_uri: str) -> None:
    url = f"{mongo_uri.rstrip('/')}/permanent_{threading.get_ident()}"
    store = open_store(url, "items")
    store.open()
    docs = batch_with_one_poisoned()
    docs["k2"]["v"] = "x" * (17 * 1024 * 1024)  # over the 16 MiB BSON limit: DocumentTooLarge
    col = Collect(store)
    col.run(docs)
    assert not col.fatal
    assert {k for k, r in col.results.items() if isinstance(r, Stored)} == {"k0", "k1", "k3", "k4"}
    bad = col.results["k2"]
    # refused by the server (a write error of a non-transient code) or by the driver
    assert isinstance(bad, DeadLettered), bad
    assert "larger than" in bad.reason or "DocumentTooLarge" in bad.reason, bad.reason
    assert {d["_id"] for d in store.documents()} == {"k0", "k1", "k3", "k4"}
    assert [d["key"] for d in store.dead_letters()] == ["k2"]
    store.close()


def _broken_items_table(path: Path) -> None:
    """Right columns (so the store opens), but every write hits a table that is not there."""
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE items (key TEXT PRIMARY KEY, doc TEXT NOT NULL)")
        c.execute("CREATE TABLE gone (x)")
        c.execute("CREATE TRIGGER audit AFTER INSERT ON items BEGIN INSERT INTO gone VALUES (NEW.key); END")
        c.execute("DROP TABLE gone")


@pytest.mark.pure
def test_sqlite_schema_error_stops_the_writer_instead_of_looping(tmp_path: Path) -> None:
    path = tmp_path / "items.sqlite"
    _broken_items_table(path)
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


@pytest.mark.pure
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


@pytest.mark.crawl
def test_crawl_into_a_schema_broken_sqlite_store_ends_loudly(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    db = tmp_path / "state" / "items.sqlite"
    _broken_items_table(db)
    with Testbed(hosts=1, pages=20, seed=2) as tb:
        res = run_crawl(tb, {**ONLY_STORE, "SCALE_STORE_URL": f"sqlite:///{db}"}, tmp_path, timeout=90)
    assert res.stats["finish_reason"] == "store_failed", res.tail()
    assert res.returncode == 1, res.tail()  # a crawl whose store cannot be written does not exit 0
    assert "SCALE_STORE_URL store cannot be written, closing the spider" in res.log
    assert "no such table: main.gone" in res.log
    assert res.stats.get("item_scraped_count", 0) == 0
    assert res.stats["scale/store/failed"]


@pytest.mark.crawl
def test_crawl_into_a_sqlite_table_of_another_schema_fails_at_startup(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    db = tmp_path / "state" / "items.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (id TEXT PRIMARY KEY, body TEXT)")
    res = run_crawl(
        None,
        {**ONLY_STORE, "SCALE_STORE_URL": f"sqlite:///{db}"},
        tmp_path,
        spider="catalog",
        timeout=60,
        start_urls=["data:,x"],
    )
    assert res.returncode != 0
    assert "SCALE_STORE_URL: cannot open the SQLite file" in res.log and "no such column" in res.log


@pytest.mark.serial
@pytest.mark.crawl
def test_ctrl_c_during_a_mongodb_outage_ends_the_crawl(tmp_path: Path, mongo_server) -> None:
    """Shutdown while the store is down: the waiting items fail loudly (logged and
    counted) instead of holding the shutdown until the store returns."""
    url = f"mongodb://127.0.0.1:{mongo_server.port}/crawl?serverSelectionTimeoutMS=500"
    with Testbed(hosts=2, pages=150, seed=7) as tb:
        proc = start_crawl(
            tb,
            {
                **ONLY_STORE,
                "SCALE_STORE_URL": url,
                "SCALE_STORE_RETRY_MAX_DELAY": 1.0,
                "SCALE_STORE_MAX_LATENCY": 0.05,
            },
            tmp_path,
        )
        kill_store_once_stored(proc, url, mongo_server, rows=20, down=2)
        os.kill(proc.pid, signal.SIGINT)
        res = proc.finish(30)
    assert res.stats["finish_reason"] == "shutdown", res.tail()
    assert "shutting down while the store is unavailable" in res.log
    assert res.stats["scale/store/abandoned"] >= 1
    assert "is unavailable: item not stored" in res.log
