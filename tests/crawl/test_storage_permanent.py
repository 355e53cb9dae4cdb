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

from scrapy_scale.storage.backends import open_store
from scrapy_scale.storage.writer import DeadLettered, Stored
from scrapy_scale.testbed import Testbed
from tests.crawl.test_storage_crawl import kill_store_once_stored
from tests.support.crawling import run_crawl, start_crawl
from tests.unit.test_storage_permanent_writer import Collect, batch_with_one_poisoned, broken_items_table

pytestmark = pytest.mark.crawl

ONLY_STORE = {
    "ITEM_PIPELINES": {"scrapy_scale.storage.StorePipeline": 900},
    "SPIDER_MIDDLEWARES": {"scrapy_scale.storage.StoreSpiderMiddleware": 50},
}


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


def test_crawl_into_a_schema_broken_sqlite_store_ends_loudly(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    db = tmp_path / "state" / "items.sqlite"
    broken_items_table(db)
    with Testbed(hosts=1, pages=20, seed=2) as tb:
        res = run_crawl(tb, {**ONLY_STORE, "SCALE_STORE_URL": f"sqlite:///{db}"}, tmp_path, timeout=90)
    assert res.stats["finish_reason"] == "store_failed", res.tail()
    assert res.returncode == 1, res.tail()  # a crawl whose store cannot be written does not exit 0
    assert "SCALE_STORE_URL store cannot be written, closing the spider" in res.log
    assert "no such table: main.gone" in res.log
    assert res.stats.get("item_scraped_count", 0) == 0
    assert res.stats["scale/store/failed"]


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
