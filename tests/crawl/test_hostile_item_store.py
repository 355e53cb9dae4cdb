"""Issue 35: hostile rows in the SQLite item store and in the quality history it keeps.

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
