"""Every promise the README makes, tested so that breaking the promise fails a test.

Promises tested elsewhere (named here so none is lost):
- the demo `scrapy crawl catalog` and its summary: tests/test_demo.py;
- the settings table matches the registry: tests/test_config.py;
- each component alone in the classic settings: tests/test_retry_crawl.py ("explicit"),
  tests/test_frontier_scheduler.py (test_plain_scrapy_without_the_addon),
  tests/test_storage_crawl.py (ITEM_PIPELINES without the add-on);
- `scrapy crawl` resumes after kill -9: tests/test_frontier_crash.py, tests/test_storage_crawl.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

from scrapy_scale.addon import Addon
from scrapy_scale.testbed import Testbed
from tests.crawling import ROOT, run_crawl

README = (ROOT / "README.md").read_text()
SCRAPY = str(Path(sys.executable).with_name("scrapy"))

RETRY_MW = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
#: what "one line enables everything" means, by the README's own list of problems
EVERYTHING = {
    "DOWNLOADER_MIDDLEWARES": ["scrapy_scale.outcomes.middleware.OutcomeDownloaderMiddleware"],
    "SPIDER_MIDDLEWARES": [
        "scrapy_scale.outcomes.middleware.OutcomeSpiderMiddleware",
        "scrapy_scale.storage.sources.StoreSpiderMiddleware",
    ],
    "ITEM_PIPELINES": ["scrapy_scale.storage.pipeline.StorePipeline"],
    "EXTENSIONS": ["scrapy_scale.config.check.SettingsCheck", "scrapy_scale.monitor.summary.RunSummary"],
}


def _enabled(settings: Settings, name: str) -> dict[object, object]:
    """The component dict as classes -> order (None = disabled)."""
    return {load_object(k) if isinstance(k, str) else k: v for k, v in settings.getdict(name).items()}


@pytest.mark.pure
def test_the_readme_names_the_addon_line_that_is_tested_here():
    assert 'ADDONS = {"scrapy_scale.Addon": 0}' in README
    assert load_object("scrapy_scale.Addon") is Addon


@pytest.mark.pure
def test_one_line_enables_everything():
    s = Settings()
    Addon().update_settings(s)
    for dict_name, paths in EVERYTHING.items():
        got = _enabled(s, dict_name)
        for path in paths:
            assert got.get(load_object(path)) is not None, f"{path} not enabled in {dict_name}"
    assert load_object(s["SCHEDULER"]) is load_object("scrapy_scale.frontier.Scheduler")
    # classify once: Scrapy's own retries are superseded
    assert _enabled(s, "DOWNLOADER_MIDDLEWARES")[load_object(RETRY_MW)] is None


@pytest.mark.pure
def test_polite_defaults():
    assert "`ROBOTSTXT_OBEY = True` and\n`CONCURRENT_REQUESTS_PER_DOMAIN = 4`" in README
    s = Settings()
    assert s.getbool("ROBOTSTXT_OBEY") is False  # Scrapy's own default, so the add-on is what changes it
    Addon().update_settings(s)
    assert s.getbool("ROBOTSTXT_OBEY") is True
    assert s.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 4
    assert s.getpriority("ROBOTSTXT_OBEY") == s.getpriority("CONCURRENT_REQUESTS_PER_DOMAIN") == 15  # "addon"


@pytest.mark.pure
def test_anything_the_project_sets_wins():
    ours = "scrapy_scale.outcomes.middleware.OutcomeDownloaderMiddleware"
    project = {
        "ROBOTSTXT_OBEY": False,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",
        # another order for one component, another disabled, Scrapy's retries kept on purpose
        "DOWNLOADER_MIDDLEWARES": {ours: 560, RETRY_MW: 500},
        "ITEM_PIPELINES": {"scrapy_scale.storage.StorePipeline": None},
        "EXTENSIONS": {"scrapy_scale.monitor.summary.RunSummary": None},
    }
    s = Settings()
    s.setdict(project, priority="project")
    Addon().update_settings(s)
    assert s.getbool("ROBOTSTXT_OBEY") is False
    assert s.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 16
    assert s["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    dm = _enabled(s, "DOWNLOADER_MIDDLEWARES")
    assert dm[load_object(ours)] == 560
    assert dm[load_object(RETRY_MW)] == 500
    assert _enabled(s, "ITEM_PIPELINES")[load_object("scrapy_scale.storage.pipeline.StorePipeline")] is None
    assert _enabled(s, "EXTENSIONS")[load_object("scrapy_scale.monitor.summary.RunSummary")] is None
    # what the project did not name is still filled in
    assert _enabled(s, "SPIDER_MIDDLEWARES")[load_object(EVERYTHING["SPIDER_MIDDLEWARES"][0])] is not None


@pytest.mark.pure
def test_the_master_switch_leaves_plain_scrapy():
    """SCALE_ENABLED = False: "leaves the crawl exactly as plain Scrapy would run it"."""
    s = Settings({"SCALE_ENABLED": False})
    before = {k: (s.getpriority(k), repr(s[k])) for k in s}
    Addon().update_settings(s)
    after = {k: (s.getpriority(k), repr(s[k])) for k in s}
    assert after == before


@pytest.mark.pure
def test_the_quick_start_install_line_is_what_ci_runs():
    line = 'pip install -e ".[all,test]"'
    assert line in README
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK)
    assert line.replace("pip install", "pip install -q") in ci.read_text() or line in ci.read_text()
    cfg = (ROOT / "setup.cfg").read_text()
    extras = re.search(r"^\[options\.extras_require\]\n((?:.+\n?)+)", cfg, re.M)
    assert extras, "setup.cfg has no extras"
    names = set(re.findall(r"^(\w+) *=", extras.group(1), re.M))
    assert {"all", "test"} <= names, names


@pytest.mark.pure
def test_the_readme_test_command_is_what_ci_runs():
    """The README's test command is the one .ci/run (and tox) calls: the parallel part, then the serial one."""
    shown = re.search(r"^(python -m \S+) +# the tests", README, re.M)
    assert shown and shown.group(1) == "python -m tests", shown
    assert re.search(r"^python -m tests\b", (ROOT / ".ci" / "run").read_text(), re.M)
    assert "python -m tests {posargs}" in (ROOT / "tox.ini").read_text()
    assert (ROOT / "tests" / "__main__.py").exists()


def _crawl_fails_at_once(*args: str, tmp_path: Path) -> str:
    t0 = time.monotonic()
    proc = subprocess.run(
        [SCRAPY, "crawl", "catalog", "-s", f"SCALE_STATE_DIR={tmp_path / 'state'}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, (proc.returncode, out[-2000:])  # README: "stops the crawl at once (exit status 1)"
    assert "Spider opened" not in out, "the crawl started before the bad setting stopped it"
    assert took < 30, took
    return out


@pytest.mark.serial
@pytest.mark.crawl
def test_an_unknown_scale_name_stops_the_crawl_at_once_naming_it(tmp_path: Path):
    out = _crawl_fails_at_once("-s", "SCALE_FRONTIER_BACH=10", tmp_path=tmp_path)
    assert "bad setting SCALE_FRONTIER_BACH = '10': unknown setting; did you mean SCALE_FRONTIER_BATCH?" in out
    assert not (tmp_path / "state").exists(), "state was written by a crawl that should not have started"


@pytest.mark.serial
@pytest.mark.crawl
@pytest.mark.parametrize(
    "setting,problem",
    [("SCALE_FRONTIER_BATCH=0", "must be >= 1"), ("SCALE_STORE_URL=mysql://db/x", "unknown URL scheme")],
)
def test_a_bad_value_stops_the_crawl_at_once_naming_the_setting(tmp_path: Path, setting: str, problem: str):
    out = _crawl_fails_at_once("-s", setting, tmp_path=tmp_path)
    name = setting.split("=")[0]
    assert re.search(rf"bad setting {name} = [^\n]*: [^\n]*{re.escape(problem)}", out), out[-2000:]


@pytest.mark.crawl
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


@pytest.mark.pure
def test_retry_after_max_reaches_the_policy():
    """SCALE_RETRY_AFTER_MAX: "a longer one is clamped to it with a warning" (the clamping
    itself: tests/test_retry_policy.py); here: the setting is the value the policy uses."""
    from scrapy.utils.test import get_crawler

    from scrapy_scale.outcomes.core import OutcomeCore

    core = OutcomeCore(get_crawler(settings_dict={"SCALE_RETRY_AFTER_MAX": "7.5"}))
    assert core.policy.retry_after_max == 7.5


def _table(db: Path, table: str) -> list[dict[str, object]]:
    import json
    import sqlite3

    with sqlite3.connect(db) as conn:
        return [json.loads(doc) for (doc,) in conn.execute(f'SELECT doc FROM "{table}"')]


@pytest.mark.crawl
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
