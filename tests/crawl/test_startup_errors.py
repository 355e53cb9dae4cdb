"""A bad setting stops `scrapy crawl` with one clear ERROR line: the setting, its value
(secrets redacted) and what is wrong; exit status 1 (README); no traceback unless
LOG_LEVEL=DEBUG. Real `scrapy crawl` subprocesses (tests/support/crawling.py), settings given
with -s as a user types them; the lines of the add-on's value checks are checked in this
process, on a Crawler created with the add-on (as the crawl creates it)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from scrapy_scale.storage.keys import declared_key
from scrapy_scale.testbed import Testbed
from tests.support.crawling import run_crawl
from tests.unit.test_startup_errors import ADDON_CHECKED

pytestmark = pytest.mark.crawl

#: nothing listens there; the crawl must stop before any request anyway
NOWHERE = ["http://127.0.0.1:9/"]

ERROR_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[([\w.]+)\] ERROR: (.*)$", re.M)


def _crawl(tmp_path: Path, *settings: str, log_level: str = "INFO"):
    args: list[str] = []
    for s in settings:
        args += ["-s", s]
    return run_crawl(None, {"LOG_LEVEL": log_level}, tmp_path, start_urls=NOWHERE, extra_args=args, timeout=90)


def _first_error(log: str) -> str:
    m = ERROR_LINE.search(log)
    assert m, f"no ERROR line:\n{log[-3000:]}"
    assert m.group(1) == "scrapy_scale", m.group(0)
    return m.group(2)


#: the whole path in a real `scrapy crawl`: exit status 1, no traceback, no password in
#: the log, nothing fetched; one setting the add-on finds, one a component finds
@pytest.mark.parametrize(
    "setting,first_error",
    [
        ADDON_CHECKED[1],
        # found when a component starts (not by the add-on's check of values)
        (
            "SCALE_BLOCK_DETECTORS=no_such_module.Detector",
            "Cannot start: bad setting SCALE_BLOCK_DETECTORS: cannot import 'no_such_module.Detector':"
            " No module named 'no_such_module'",
        ),
    ],
)
def test_a_bad_setting_is_one_clear_error_line(tmp_path: Path, setting: str, first_error: str) -> None:
    res = _crawl(tmp_path, setting)
    assert res.returncode == 1, (res.returncode, res.tail())
    assert _first_error(res.log) == first_error, res.tail()
    assert "Traceback" not in res.log, res.tail()
    assert "hunter2" not in res.log
    assert "Task exception was never retrieved" not in res.log
    assert res.stats.get("response_received_count") is None  # nothing was fetched


def test_a_store_file_that_cannot_be_opened_is_one_clear_error_line(tmp_path: Path) -> None:
    """Found when the store is opened (not by parsing the URL): before the engine opens, so
    Scrapy logs no traceback of its own (CoreStats' on a spider closed before it opened)."""
    (tmp_path / "a_file").write_text("")
    res = _crawl(tmp_path, f"SCALE_STORE_URL=sqlite:///{tmp_path}/a_file/items.sqlite")
    assert res.returncode == 1, (res.returncode, res.tail())
    assert _first_error(res.log).startswith(
        "Cannot start: bad setting SCALE_STORE_URL: cannot open the SQLite file: "
    ), res.tail()
    assert "Traceback" not in res.log, res.tail()
    assert "Spider opened" not in res.log


def test_at_debug_level_the_traceback_follows_the_error_line(tmp_path: Path) -> None:
    res = _crawl(tmp_path, "SCALE_FRONTIER_BATCH=abc", log_level="DEBUG")
    assert res.returncode == 1, (res.returncode, res.tail())
    assert _first_error(res.log) == "Cannot start: bad setting SCALE_FRONTIER_BATCH = 'abc': expected an integer"
    first = ERROR_LINE.search(res.log)
    assert first and "Traceback" in res.log[first.end() :], res.tail()


def test_list_settings_from_the_command_line_work(tmp_path: Path) -> None:
    """`-s SCALE_ITEM_KEY=sku` keys every item type by its sku, and list settings take a
    comma-separated string (SCALE_ITEM_KEY=sku used to fail: "not valid JSON")."""
    with Testbed(hosts=1, pages=5, seed=1) as tb:
        args = ["-s", "SCALE_ITEM_KEY=sku", "-s", "SCALE_CRITICAL_FIELDS=sku,price"]
        res = run_crawl(tb, None, tmp_path, extra_args=args, timeout=90)
    assert res.returncode == 0, res.tail()
    assert "bad setting" not in res.log, res.tail()
    with sqlite3.connect(tmp_path / "state" / "items.sqlite") as conn:
        rows = conn.execute("SELECT key, doc FROM items").fetchall()
    assert len(rows) == 5, rows
    for key, doc in rows:
        assert key == declared_key("dict", ["sku"], json.loads(doc), None)
    assert res.stats.get("scale/outcome/parse_failed") is None  # every item has sku and price
