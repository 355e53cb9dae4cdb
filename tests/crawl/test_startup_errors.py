"""A crawl that cannot start stops `scrapy crawl` with one clear ERROR line: the setting,
its value (secrets redacted) and what is wrong, or the store or frontier it cannot reach;
exit status 1 (README); no traceback at any log level. Real `scrapy crawl` subprocesses
(tests/support/crawling.py), settings given with -s as a user types them, and a project
made by `scrapy startproject` with Scrapy's defaults (LOG_LEVEL DEBUG); the lines of the
add-on's value checks are checked in this process, on a Crawler created with the add-on
(as the crawl creates it)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from scrapy_scale.storage.keys import declared_key
from scrapy_scale.testbed import Testbed
from tests.support.crawling import ROOT, run_crawl
from tests.support.hang import hang_guard
from tests.support.services import free_port
from tests.unit.test_startup_errors_addon_checks import ADDON_CHECKED

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


#: the text of a line a scrapy_scale logger wrote at WARNING or above
OUR_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[scrapy_scale[\w.]*\] (?:WARNING|ERROR|CRITICAL): (.*)$", re.M)


@pytest.fixture(scope="module")
def new_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project as `scrapy startproject` makes it (Scrapy's defaults: LOG_LEVEL DEBUG),
    with the add-on and a spider whose one URL nothing answers."""
    root = tmp_path_factory.mktemp("startproject")
    made = subprocess.run(
        [sys.executable, "-m", "scrapy", "startproject", "shop"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=hang_guard(60),
    )
    assert made.returncode == 0, made.stderr
    project = root / "shop"
    settings = project / "shop" / "settings.py"
    assert "LOG_LEVEL" not in settings.read_text()  # Scrapy's default level: DEBUG
    with settings.open("a") as f:
        f.write('\nADDONS = {"scrapy_scale.addon.Addon": 100}\n')
    (project / "shop" / "spiders" / "products.py").write_text(
        "import scrapy\n\n\nclass Products(scrapy.Spider):\n"
        f"    name = 'products'\n    start_urls = {NOWHERE!r}\n\n"
        "    def parse(self, response):\n        yield {'url': response.url}\n"
    )
    return project


@pytest.mark.parametrize(
    "setting,line",
    [
        (
            "SCALE_FRONTER_URL=redis://127.0.0.1:6379/0",
            "Cannot start: bad setting SCALE_FRONTER_URL = 'redis://127.0.0.1:6379/0': unknown setting;"
            " did you mean SCALE_FRONTIER_URL?",
        ),
        ("SCALE_FRONTIER_BATCH=abc", "Cannot start: bad setting SCALE_FRONTIER_BATCH = 'abc': expected an integer"),
        (
            "SCALE_FRONTIER_URL=redis://127.0.0.1:{port}/0",
            "Cannot start: cannot reach Redis for the frontier at redis://127.0.0.1:{port}/0 (ConnectionError: "
            "Error 111 connecting to 127.0.0.1:{port}. Connection refused.); start Redis there, or fix SCALE_FRONTIER_URL",
        ),
        (
            "SCALE_STORE_URL=mongodb://127.0.0.1:{port}/shop",
            "Cannot start: bad setting SCALE_STORE_URL: cannot reach MongoDB at mongodb://127.0.0.1:{port}/shop within"
            " 5 s (ServerSelectionTimeoutError: 127.0.0.1:{port}: [Errno 111] Connection refused); start MongoDB"
            " there, or fix SCALE_STORE_URL",
        ),
    ],
    ids=["misspelt-name", "bad-value", "frontier-unreachable", "store-unreachable"],
)
def test_a_new_project_at_scrapys_log_level_gets_one_line(new_project: Path, setting: str, line: str) -> None:
    """At Scrapy's default level (DEBUG) a bad setting printed its line, then asyncio's
    `Task exception was never retrieved` and a 14-line traceback; an unreachable frontier
    the same, with Scrapy's `Engine slot not assigned` on top; an unreachable MongoDB
    store let the crawl start and wait for it."""
    port = free_port()  # nothing listens there
    res = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "products", "-s", setting.format(port=port)],
        cwd=new_project,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=hang_guard(90),
    )
    assert res.returncode == 1, (res.returncode, res.stderr[-3000:])
    assert "] DEBUG: " in res.stderr  # the level a new project logs at
    assert OUR_LINE.findall(res.stderr) == [line.format(port=port)], res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "Task exception was never retrieved" not in res.stderr
    assert "Crawled (" not in res.stderr  # nothing was fetched


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
