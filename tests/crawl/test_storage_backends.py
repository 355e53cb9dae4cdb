"""One conformance suite for every item store backend (SQLite file, MongoDB server),
and the batch writer on top of them. Real stores: a SQLite file, and the MongoDB wire
server of the `mongo_uri` fixture (SecantusDB, or a real mongod with MONGO_URI)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from scrapy_scale.storage.backends import DeadRow, Row, Store, open_store
from scrapy_scale.storage.encode import encode_item
from scrapy_scale.storage.writer import (
    BatchReport,
    BatchWriter,
    DeadLettered,
    Result,
    Stored,
    Submission,
)

pytestmark = pytest.mark.crawl


@pytest.fixture(params=["sqlite", "mongodb"])
def store_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/items.sqlite"
    uri = request.getfixturevalue("mongo_uri").rstrip("/")
    return f"{uri}/t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(store_url: str):
    s = open_store(store_url, "items")
    s.open()
    yield s
    s.close()


def rows(n: int, **extra) -> list[Row]:
    return [Row(f"k{i:03d}", {"n": i, **extra}) for i in range(n)]


def strip_times(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("_first_seen", "_last_seen", "_id")}


def test_upsert_is_idempotent_and_counts_inserted_vs_updated(store: Store):
    r1 = store.write(rows(5, v="a"), now=100.0)
    assert sorted(r1.inserted) == [f"k{i:03d}" for i in range(5)] and not r1.updated and not r1.failed
    before = {d["_id"]: strip_times(d) for d in store.documents()}
    r2 = store.write(rows(5, v="a"), now=101.0)
    assert not r2.inserted and sorted(r2.updated) == sorted(r1.inserted)
    r3 = store.write(rows(7, v="a"), now=102.0)
    assert sorted(r3.inserted) == ["k005", "k006"] and len(r3.updated) == 5
    assert store.count() == 7
    after = {d["_id"]: strip_times(d) for d in store.documents()}
    assert {k: after[k] for k in before} == before


def test_first_seen_stays_last_seen_moves_and_old_fields_are_kept(store: Store):
    store.write([Row("a", {"x": 1, "only_first": True})], now=100.0)
    store.write([Row("a", {"x": 2})], now=200.0)
    doc = store.get("a")
    assert doc is not None
    assert doc["_first_seen"] == 100.0 and doc["_last_seen"] == 200.0
    assert doc["x"] == 2 and doc["only_first"] is True
    assert store.get("missing") is None


def test_get_many_reads_back_what_get_reads_in_bulk(store: Store):
    store.write(rows(1203), now=100.0)  # more keys than one SQLite statement may bind
    wanted = [f"k{i:03d}" for i in range(0, 1203, 2)] + ["missing", "k000"]
    got = store.get_many(wanted)
    assert set(got) == {f"k{i:03d}" for i in range(0, 1203, 2)}  # unknown keys left out, each once
    assert all(got[k] == store.get(k) for k in ("k000", "k602", "k1202"))
    assert store.get_many([]) == {}


def test_configured_bookkeeping_field_names(store_url: str):
    s = open_store(
        store_url,
        "renamed",
        fields={
            "first_seen": "created",
            "last_seen": "seen",
            "run_id": "run",
            "job": "job",
            "source_url": "url0",
            "item_type": "type",
        },
    )
    try:
        s.write([Row("a", {"x": 1})], now=5.0)
        doc = s.get("a")
        assert doc == {"x": 1, "created": 5.0, "seen": 5.0}
    finally:
        s.close()


def test_encoded_documents_round_trip_exactly(store: Store):
    import datetime as dt
    from decimal import Decimal

    doc = encode_item(
        {
            "when": dt.datetime(2026, 1, 1, 12, 0),
            "price": Decimal("1.10"),
            "raw": b"\x01",
            "tags": {"z", "y"},
            "big": 2**64,
            "nan": float("nan"),
            "nested": {"a.b": [1, None, {"c": True}]},
            "text": "naïve ☃",
        },
        set(),
    )
    store.write([Row("k", doc)], now=1.0)
    got = store.get("k")
    assert got is not None
    assert strip_times(got) == doc


def test_dead_letter_records_can_be_deleted_by_id(store: Store):
    """A side collection kept through the dead-letter methods (the quality history) is pruned."""
    store.dead_letter([DeadRow(f"d{i}", {"n": i}) for i in range(4)], now=10.0)
    store.delete_dead_letters(["d1", "d3", "nope"])
    store.delete_dead_letters([])
    assert [d["_id"] for d in store.dead_letters()] == ["d0", "d2"]


def test_dead_letter_records_are_upserted_by_id(store: Store):
    store.dead_letter([DeadRow("d1", {"key": None, "reason": "invalid key: x"})], now=10.0)
    store.dead_letter(
        [DeadRow("d1", {"key": None, "reason": "invalid key: x"}), DeadRow("d2", {"key": "k", "reason": "too large"})],
        now=11.0,
    )
    dl = store.dead_letters()
    assert [(d["_id"], d["reason"]) for d in dl] == [("d1", "invalid key: x"), ("d2", "too large")]
    assert store.count() == 0, "dead letters are not items"


# ---- the batch writer over each backend --------------------------------------------


class Collector:
    def __init__(self) -> None:
        self.results: dict[str, Result] = {}
        self.times: dict[str, float] = {}
        self.reports: list[BatchReport] = []
        self.lock = threading.Lock()
        self.event = threading.Event()
        self.expect = 0

    def done_for(self, name: str):
        def done(r: Result) -> None:
            with self.lock:
                self.results[name] = r
                self.times[name] = time.monotonic()
                if len(self.results) >= self.expect:
                    self.event.set()

        return done

    def wait(self, n: int, timeout: float) -> bool:
        with self.lock:
            self.expect = n
            if len(self.results) >= n:
                return True
        return self.event.wait(timeout)


def submit(w: BatchWriter, c: Collector, key: str, doc: dict) -> None:
    w.submit(
        Submission(
            done=c.done_for(key),
            row=Row(key, doc),
            on_refused=lambda reason: DeadRow("dl-" + key, {"key": key, "reason": reason}),
        )
    )


def test_batch_is_written_when_its_oldest_item_reaches_max_latency(store: Store):
    c = Collector()
    w = BatchWriter(store, batch_size=1000, max_latency=0.3, report=c.reports.append)
    w.start()
    t0 = time.monotonic()
    for i in range(3):
        submit(w, c, f"k{i}", {"i": i})
    assert not c.wait(3, 0.15), "written before max_latency with a batch far from full"
    assert c.wait(3, 5)
    assert min(c.times.values()) - t0 >= 0.25
    assert [r.items for r in c.reports] == [3]
    assert all(isinstance(r, Stored) and r.inserted for r in c.results.values())
    assert store.count() == 3
    w.close()


def test_full_batches_go_at_once_and_close_flushes_the_rest(store: Store):
    c = Collector()
    w = BatchWriter(store, batch_size=10, max_latency=60, report=c.reports.append)
    w.start()
    for i in range(25):
        submit(w, c, f"k{i:02d}", {"i": i})
    assert c.wait(20, 5), "two full batches are written without waiting for the latency"
    time.sleep(0.2)
    assert len(c.results) == 20 and store.count() == 20
    assert w.close(timeout=10)
    assert len(c.results) == 25 and store.count() == 25
    assert [r.items for r in c.reports] == [10, 10, 5]


def test_same_key_twice_in_one_batch_is_one_upsert_later_fields_win(store: Store):
    c = Collector()
    w = BatchWriter(store, batch_size=10, max_latency=60, report=c.reports.append)
    w.start()
    w.submit(Submission(done=c.done_for("a1"), row=Row("a", {"x": 1, "y": 1})))
    w.submit(Submission(done=c.done_for("a2"), row=Row("a", {"x": 2})))
    w.close()
    assert c.results["a1"] == Stored("a", True) and c.results["a2"] == Stored("a", False)
    doc = store.get("a")
    assert doc is not None and (doc["x"], doc["y"]) == (2, 1)
    assert (c.reports[0].inserted, c.reports[0].updated) == (1, 1)


def test_dead_submissions_are_recorded_before_done(store: Store):
    c = Collector()
    w = BatchWriter(store, batch_size=10, max_latency=0)
    w.start()
    w.submit(
        Submission(
            done=c.done_for("bad"), dead=DeadRow("x", {"key": None, "reason": "invalid key"}), reason="invalid key"
        )
    )
    assert c.wait(1, 5)
    assert c.results["bad"] == DeadLettered(None, "invalid key")
    assert [d["reason"] for d in store.dead_letters()] == ["invalid key"]
    w.close()


def test_mongodb_refusing_one_row_dead_letters_it_and_stores_the_rest(mongo_uri: str):
    """A document over MongoDB's 16 MiB limit: the server (or driver) refuses it; the batch
    is split and only that row goes to the dead letter, with the store's reason."""
    s = open_store(f"{mongo_uri.rstrip('/')}/t{uuid.uuid4().hex[:10]}", "items")
    c = Collector()
    w = BatchWriter(s, batch_size=10, max_latency=60)
    w.start()
    submit(w, c, "ok1", {"x": 1})
    submit(w, c, "huge", {"x": "y" * (17 * 1024 * 1024)})
    submit(w, c, "ok2", {"x": 2})
    w.close()
    assert isinstance(c.results["huge"], DeadLettered)
    assert isinstance(c.results["ok1"], Stored) and isinstance(c.results["ok2"], Stored)
    assert s.count() == 2
    assert [d["key"] for d in s.dead_letters()] == ["huge"]
    s.close()


@pytest.mark.serial
def test_mongodb_killed_and_restarted_nothing_lost(mongo_server):
    """The server dies mid-stream: items wait (not done, not dropped), the writer retries
    with backoff, and once the server is back every item is stored exactly once."""
    url = f"mongodb://127.0.0.1:{mongo_server.port}/outage"
    s = open_store(url, "items")
    s.timeout_ms = 1000  # type: ignore[attr-defined]
    c = Collector()
    outages: list[int] = []
    w = BatchWriter(
        s,
        batch_size=20,
        max_latency=0.05,
        retry_max_delay=0.5,
        on_unavailable=lambda e, n, d: outages.append(n),
        report=c.reports.append,
    )
    w.start()
    for i in range(50):
        submit(w, c, f"a{i:03d}", {"i": i})
    assert c.wait(50, 20)
    mongo_server.kill()
    for i in range(50):
        submit(w, c, f"b{i:03d}", {"i": i})
    time.sleep(2.5)
    assert len(c.results) == 50, "an item was reported stored while the server was down"
    assert outages, "the writer did not notice the outage"
    mongo_server.start()
    assert c.wait(100, 60), f"only {len(c.results)} of 100 stored after the restart"
    w.close()
    assert all(isinstance(r, Stored) for r in c.results.values())
    assert s.count() == 100
    assert sum(r.retries for r in c.reports) >= 1
    s.close()


def test_two_jobs_writing_the_same_keys_keep_their_own_rows(store: Store):
    """Issue 31: a second job crawling the same pages into the same table counted every
    item as updated and relabelled the first job's rows with its own `_job`."""
    store.write([Row("a", {"_job": "baseline", "v": 1}), Row("b", {"_job": "baseline", "v": 1})], now=100.0)
    r = store.write([Row("a", {"_job": "products", "v": 2}), Row("c", {"_job": "products", "v": 2})], now=200.0)
    assert sorted(r.inserted) == ["a", "c"] and not r.updated and not r.failed and not r.retry
    docs = {d["_id"]: d for d in store.documents()}
    assert {i: (d["_job"], d["v"]) for i, d in docs.items()} == {
        "a": ("baseline", 1),
        "b": ("baseline", 1),
        "a@products": ("products", 2),
        "c": ("products", 2),
    }
    # each job's next write finds its own row again: an update, still nobody else's row
    r = store.write([Row("a", {"_job": "products", "v": 3})], now=300.0)
    r2 = store.write([Row("a", {"_job": "baseline", "v": 4}), Row("c", {"_job": "baseline", "v": 4})], now=300.0)
    assert r.updated == ["a"] and not r.inserted
    assert r2.updated == ["a"] and r2.inserted == ["c"]
    docs = {d["_id"]: d for d in store.documents()}
    assert docs["a"]["_job"] == "baseline" and docs["a"]["v"] == 4 and docs["a"]["_first_seen"] == 100.0
    assert docs["a@products"]["v"] == 3 and docs["a@products"]["_first_seen"] == 200.0
    assert docs["c"]["_job"] == "products" and docs["c@baseline"]["v"] == 4
    # reading back by key and job gives each job its own document
    assert {k: d["v"] for k, d in store.get_many(["a", "b", "c"], "products").items()} == {"a": 3, "c": 2}
    assert {k: d["v"] for k, d in store.get_many(["a", "b", "c"], "baseline").items()} == {"a": 4, "b": 1, "c": 4}
    assert store.get_many(["a"], "other") == {}


def test_a_row_written_without_a_job_stays_the_key_of_the_job_that_writes_it_next(store: Store):
    store.write([Row("a", {"v": 1})], now=100.0)  # a store written before rows named their job
    r = store.write([Row("a", {"_job": "baseline", "v": 2})], now=200.0)
    assert r.updated == ["a"] and store.count() == 1
    assert store.get("a") is not None and store.get("a")["_job"] == "baseline"  # type: ignore[index]


def test_mongo_upsert_never_takes_a_row_another_job_wrote_after_the_read(mongo_uri: str) -> None:
    """The MongoDB write reads the owners, then upserts; a row another job inserts in between
    must make the upsert a duplicate key (retried, and placed again), never an update of it."""
    from pymongo import errors

    from scrapy_scale.storage.backends import MongoStore

    s = open_store(f"{mongo_uri.rstrip('/')}/t{uuid.uuid4().hex[:10]}", "items")
    assert isinstance(s, MongoStore)
    s.open()
    try:
        s.write([Row("a", {"_job": "baseline", "v": 1})], now=100.0)
        # products' upsert as write() built it before baseline's row existed (the race)
        op = s._upsert(Row("a", {"_job": "products", "v": 2}), "a", now=200.0)
        with pytest.raises(errors.BulkWriteError) as e:
            s._items.bulk_write([op], ordered=False)
        assert e.value.details["writeErrors"][0]["code"] == 11000
        assert s.get("a") == {"_job": "baseline", "v": 1, "_first_seen": 100.0, "_last_seen": 100.0}
        # write() retries such a row, and the next read places it under products' own id
        r = s.write([Row("a", {"_job": "products", "v": 2})], now=300.0)
        assert r.inserted == ["a"] and {d["_id"] for d in s.documents()} == {"a", "a@products"}
    finally:
        s.close()


def test_sqlite_row_that_is_not_a_json_object_is_replaced_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored row is untrusted: one that is not a JSON object (written by something else)
    must not stop the write that reads it for its owner; the item replaces it."""
    import logging
    import sqlite3

    s = open_store(f"sqlite:///{tmp_path}/items.sqlite", "items")
    s.open()
    try:
        with sqlite3.connect(tmp_path / "items.sqlite") as c:
            c.executemany("INSERT INTO items (key, doc) VALUES (?, ?)", [("a", "not json"), ("b", "[1, 2]")])
        with caplog.at_level(logging.WARNING, logger="scrapy_scale.storage.backends.sqlite"):
            r = s.write([Row("a", {"_job": "j", "v": 1}), Row("b", {"_job": "j", "v": 2})], now=100.0)
        assert sorted(r.updated) == ["a", "b"] and not r.failed
        assert s.get("a") == {"_job": "j", "v": 1, "_first_seen": 100.0, "_last_seen": 100.0}
        assert [rec.levelno for rec in caplog.records] == [logging.WARNING], caplog.text
        assert "is not a JSON object" in caplog.text
    finally:
        s.close()
