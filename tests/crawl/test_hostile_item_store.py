"""Issue 35: hostile rows in the item stores (SQLite, MongoDB) and in the quality history.

The item store is shared state too: the quality report scans its rows, a resumed run's feed
guard reads the stored items back (get_many), and the quality history (the figures of every
worker of a run, their verdicts) lives in its side table. A row that is not JSON, nested
100,000 deep, not an object, or figures with counts of text were read with json.loads,
int() and float(): the report and the feed guard raised. Now each bad row (or field) is
skipped with one warning per table and kind.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_scale.quality.figures import RunFigures
from scrapy_scale.quality.history import SEP, History
from scrapy_scale.storage.backends import Row, open_store
from tests.support.said import Said, listening

pytestmark = pytest.mark.crawl

DEEP = "[" * 100_000 + "]" * 100_000
BAD_ROWS = {"deep": DEEP, "not-json": "{not json", "not-object": "[1, 2]", "not-utf8": b"\xff{}"}


@pytest.fixture
def said() -> Iterator[Said]:
    with listening("scrapy_scale") as h:
        yield h


def test_hostile_item_rows_are_skipped_with_one_warning(tmp_path: Path, said: Said) -> None:
    url = f"sqlite:///{tmp_path / 'items.db'}"
    store = open_store(url, "items")
    store.open()
    try:
        store.write([Row("good", {"title": "a"})], 1.0)
        db = sqlite3.connect(tmp_path / "items.db", isolation_level=None)
        db.executemany("INSERT INTO items (key, doc) VALUES (?, ?)", list(BAD_ROWS.items()))
        db.close()
        for _ in range(3):
            docs = list(store.documents())
            got = store.get_many(["good", *BAD_ROWS])
            one = [store.get(k) for k in BAD_ROWS]
    finally:
        store.close()
    assert [d["_id"] for d in docs] == ["good"] and docs[0]["title"] == "a"
    assert list(got) == ["good"] and got["good"]["title"] == "a"
    assert one == [None] * len(BAD_ROWS)
    warned = [line for line in said.lines if "skipping unreadable row" in line]
    assert len(warned) == 1 and "items" in warned[0], said.lines


def test_hostile_rows_in_the_quality_history_are_skipped_with_one_warning(tmp_path: Path, said: Said) -> None:
    url = f"sqlite:///{tmp_path / 'items.db'}"
    job = f"j-{uuid.uuid4().hex[:8]}"  # warnings are once per job in a process: its own
    hist = History(url, "items", "items_quality_runs")
    hist.open()
    try:
        good = RunFigures(job=job, run_id="1", classes={"ok": 3}, validated=3)  # type: ignore[arg-type]
        hist.put_figures(good, "a", 100.0, final=True)
        # a second part of run 1 with counts of text and of the wrong type, a start of text
        bad = {"job": job, "run_id": "1", "kind": "figures", "part": "b", "started": "soon", "final": True}
        bad["data"] = {"classes": {"ok": "many", "blocked": 2}, "validated": "x", "content_fields": 5}
        db = sqlite3.connect(tmp_path / "items.db", isolation_level=None)
        rows = [(SEP.join((job, "1", "figures", "b")), json.dumps(bad), 1.0)]
        rows += [(SEP.join((job, "1", "figures", k)), v, 1.0) for k, v in BAD_ROWS.items()]
        db.executemany("INSERT INTO items_quality_runs (id, doc, at) VALUES (?, ?, ?)", rows)
        db.close()
        for _ in range(3):
            runs = hist.runs(job)
    finally:
        hist.close()
    (run,) = runs
    assert run.parts == 2 and run.started == 100.0
    assert dict(run.figures.classes) == {"ok": 3, "blocked": 2} and run.figures.validated == 3
    assert run.figures.content_fields == []
    rows_said = [line for line in said.lines if "skipping unreadable row" in line]
    fields_said = [line for line in said.lines if "quality history" in line]
    assert len(rows_said) == 1 and len(fields_said) == 1, said.lines


def test_hostile_documents_in_the_mongodb_store_are_not_read_as_the_jobs(mongo_uri: str) -> None:
    """MongoDB keeps documents, so no row is unreadable as such; what another writer can put
    there is a document of the wrong shape: an ``_id`` that is no key (a number, an
    ObjectId), bookkeeping fields of the wrong type (a job that is a list, a run of a
    mapping), content that is bytes or nested deep. The quality scan and the feed guard's
    reads must count the job's own rows and not raise."""
    import pymongo
    from bson import ObjectId

    from scrapy_scale.quality.report_build import scan_rows
    from scrapy_scale.storage.layout import META_FIELDS

    job, coll = "j-hostile", f"items_{uuid.uuid4().hex[:8]}"
    url = f"{mongo_uri.rstrip('/')}/hostile_{uuid.uuid4().hex[:8]}"
    store = open_store(url, coll)
    store.open()
    fields = dict(META_FIELDS)
    deep: dict[str, object] = {}
    node = deep
    for _ in range(60):
        node["d"] = {}
        node = node["d"]  # type: ignore[assignment]
    hostile = [
        {"_id": 7, fields["job"]: job, fields["run_id"]: "1", "title": "id of a number"},
        {"_id": ObjectId(), fields["job"]: job, fields["run_id"]: "1", "title": "id of an ObjectId"},
        {"_id": "job-list", fields["job"]: [job], fields["run_id"]: "1", "title": "x"},
        {"_id": "run-map", fields["job"]: job, fields["run_id"]: {"$gt": 0}, "title": b"\xff\x00"},
        {"_id": "deep", fields["job"]: job, fields["run_id"]: "1", "title": deep},
    ]
    try:
        store.write([Row("good", {"title": "a", fields["job"]: job, fields["run_id"]: "1"})], 1.0)
        client = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
        client.get_default_database()[coll].insert_many(hostile)
        client.close()
        scan = scan_rows(store.documents(), job, "1", fields, ["title"], ["title"])
        got = store.get_many(["good", "job-list", "run-map", "deep"], job)
    finally:
        store.close()
    # the job's rows: good, the two of other ids, run-map (its run is no run: not the run's),
    # deep; job-list names no job as a string and is not the job's
    assert scan.scan.rows == 5, scan.scan
    assert sorted(str(d.get("_id")) for d in scan.run_rows if d["_id"] in ("good", "deep", 7)) == ["7", "deep", "good"]
    assert all(d["_id"] != "run-map" for d in scan.run_rows)
    assert set(got) == {"good", "run-map", "deep"} and got["good"]["title"] == "a"  # not job-list: not the job's
