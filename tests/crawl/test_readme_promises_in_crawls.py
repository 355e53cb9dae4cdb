"""The README's promises that take a crawl or a subprocess; the others, and the list of promises
tested elsewhere, are in tests/unit/test_readme_promises.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crawling import ROOT, run_crawl
from tests.support.hang import hang_guard
from tests.unit.test_readme_promises import README

pytestmark = pytest.mark.crawl
SCRAPY = str(Path(sys.executable).with_name("scrapy"))


def _crawl_fails_at_once(*args: str, tmp_path: Path) -> str:
    t0 = time.monotonic()
    proc = subprocess.run(
        [SCRAPY, "crawl", "catalog", "-s", f"SCALE_STATE_DIR={tmp_path / 'state'}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=hang_guard(60),
    )
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, (proc.returncode, out[-2000:])  # README: "stops the crawl at once (exit status 1)"
    assert "Spider opened" not in out, "the crawl started before the bad setting stopped it"
    assert took < 30, took
    return out


@pytest.mark.paced
def test_an_unknown_scale_name_stops_the_crawl_at_once_naming_it(tmp_path: Path):
    out = _crawl_fails_at_once("-s", "SCALE_FRONTIER_BACH=10", tmp_path=tmp_path)
    assert "bad setting SCALE_FRONTIER_BACH = '10': unknown setting; did you mean SCALE_FRONTIER_BATCH?" in out
    assert not (tmp_path / "state").exists(), "state was written by a crawl that should not have started"


@pytest.mark.paced
@pytest.mark.parametrize(
    "setting,problem",
    [("SCALE_FRONTIER_BATCH=0", "must be >= 1"), ("SCALE_STORE_URL=mysql://db/x", "unknown URL scheme")],
)
def test_a_bad_value_stops_the_crawl_at_once_naming_the_setting(tmp_path: Path, setting: str, problem: str):
    out = _crawl_fails_at_once("-s", setting, tmp_path=tmp_path)
    name = setting.split("=")[0]
    assert re.search(rf"bad setting {name} = [^\n]*: [^\n]*{re.escape(problem)}", out), out[-2000:]


def test_polite_defaults_hold_in_a_real_crawl(tmp_path: Path):
    """The example project sets neither: the add-on's robots.txt obedience and per-site
    concurrency are the ones the crawl runs with."""
    with Testbed(hosts=1, pages=20, seed=1, robots_disallow=("/item/1",)) as tb:
        res = run_crawl(tb, {}, tmp_path, timeout=90)
        served = [r.path for r in tb.log]
    assert res.returncode == 0, res.tail()
    assert "/robots.txt" in served
    assert served and not [p for p in served if p.startswith("/item/1")], "robots.txt was not obeyed"
    assert re.search(r"'ROBOTSTXT_OBEY': True", res.log)
    assert re.search(r"'CONCURRENT_REQUESTS_PER_DOMAIN': 4\b", res.log)
    assert res.stats.get("robotstxt/forbidden", 0) >= 11  # /item/1 and /item/10 .. /item/19
    # the outcome table: "fatal | anything else (400, bad URL, robots.txt disallowed) | never retried; recorded"
    assert "robots.txt disallowed) | never retried; recorded" in README
    assert res.stats.get("scale/outcome/fatal") == res.stats["robotstxt/forbidden"]
    assert res.stats.get("scale/frontier/state/failed") == res.stats["robotstxt/forbidden"]
    assert not [k for k in res.stats if k.startswith("scale/retry/")]


def _table(db: Path, table: str) -> list[dict[str, object]]:
    import json
    import sqlite3

    with sqlite3.connect(db) as conn:
        return [json.loads(doc) for (doc,) in conn.execute(f'SELECT doc FROM "{table}"')]


def test_store_collection_dead_letter_and_field_names_are_the_settings(tmp_path: Path):
    """SCALE_STORE_COLLECTION, SCALE_STORE_DEAD_LETTER, SCALE_STORE_FIELDS and
    SCALE_ITEM_KEY as the settings table describes them, in real crawls."""
    names = {
        "SCALE_STORE_COLLECTION": "products",
        "SCALE_STORE_DEAD_LETTER": "rejects",
        "SCALE_STORE_FIELDS": {"first_seen": "seen_at", "run_id": "run"},
    }
    with Testbed(hosts=1, pages=5, seed=1) as tb:
        first = run_crawl(tb, names, tmp_path, timeout=90)
        assert first.returncode == 0, first.tail()
        # a new run of the same job: every item now lacks its key field, so it goes to the dead letter
        second = run_crawl(tb, {**names, "SCALE_ITEM_KEY": {"*": ["no_such_field"]}}, tmp_path, timeout=90)
        assert second.returncode == 3, second.tail()  # SCALE_EXIT_CODE_DEAD_LETTERS: a run with dead letters
    db = tmp_path / "state" / "items.sqlite"
    rows = _table(db, "products")
    assert len(rows) == 5, rows
    for doc in rows:
        assert "seen_at" in doc and "run" in doc and "_first_seen" not in doc and "_run_id" not in doc
        assert "_last_seen" in doc  # the fields not renamed keep their default names
    dead = _table(db, "rejects")
    assert len(dead) == 5 and all(d["reason"].startswith("invalid key") for d in dead), dead
    assert second.stats["scale/store/dead_lettered"] == 5
