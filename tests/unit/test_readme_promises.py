"""Every promise the README makes, tested so that breaking the promise fails a test.

Promises tested elsewhere (named here so none is lost):
- the demo `scrapy crawl catalog` and its summary: tests/crawl/test_demo.py;
- the settings table matches the registry: tests/unit/test_config.py;
- each component alone in the classic settings: tests/crawl/test_retry_crawl.py ("explicit"),
  tests/crawl/test_frontier_scheduler.py (test_plain_scrapy_without_the_addon),
  tests/crawl/test_storage_crawl.py (ITEM_PIPELINES without the add-on);
- `scrapy crawl` resumes after kill -9: tests/crawl/test_frontier_crash.py, tests/crawl/test_storage_crawl.py.
"""

from __future__ import annotations

import os
import re

import pytest
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

from scrapy_scale.addon import Addon
from tests.support.crawling import ROOT

pytestmark = pytest.mark.pure

README = (ROOT / "README.md").read_text()

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


def test_the_readme_names_the_addon_line_that_is_tested_here():
    assert 'ADDONS = {"scrapy_scale.Addon": 0}' in README
    assert load_object("scrapy_scale.Addon") is Addon


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


def test_polite_defaults():
    assert "`ROBOTSTXT_OBEY = True` and\n`CONCURRENT_REQUESTS_PER_DOMAIN = 4`" in README
    s = Settings()
    assert s.getbool("ROBOTSTXT_OBEY") is False  # Scrapy's own default, so the add-on is what changes it
    Addon().update_settings(s)
    assert s.getbool("ROBOTSTXT_OBEY") is True
    assert s.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 4
    assert s.getpriority("ROBOTSTXT_OBEY") == s.getpriority("CONCURRENT_REQUESTS_PER_DOMAIN") == 15  # "addon"


def test_the_addon_starts_fewer_item_tasks_per_response():
    assert "`CONCURRENT_ITEMS = 16` (Scrapy's 100 starts 100\ntasks for every response" in README
    s = Settings()
    assert s.getint("CONCURRENT_ITEMS") == 100  # Scrapy's own default, so the add-on is what changes it
    Addon().update_settings(s)
    assert s.getint("CONCURRENT_ITEMS") == 16 and s.getpriority("CONCURRENT_ITEMS") == 15
    mine = Settings({"CONCURRENT_ITEMS": 50})  # the project's own value wins
    Addon().update_settings(mine)
    assert mine.getint("CONCURRENT_ITEMS") == 50


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


def test_the_master_switch_leaves_plain_scrapy():
    """SCALE_ENABLED = False: "leaves the crawl exactly as plain Scrapy would run it"."""
    s = Settings({"SCALE_ENABLED": False})
    before = {k: (s.getpriority(k), repr(s[k])) for k in s}
    Addon().update_settings(s)
    after = {k: (s.getpriority(k), repr(s[k])) for k in s}
    assert after == before


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


def test_the_readme_test_command_is_what_ci_runs():
    """The README's test command is the one .ci/run (and tox) calls: the parallel part, then the serial one."""
    shown = re.search(r"^(python -m \S+) +# the tests", README, re.M)
    assert shown and shown.group(1) == "python -m tests", shown
    assert re.search(r"^python -m tests\b", (ROOT / ".ci" / "run").read_text(), re.M)
    assert "python -m tests {posargs}" in (ROOT / "tox.ini").read_text()
    assert (ROOT / "tests" / "__main__.py").exists()


def test_retry_after_max_reaches_the_policy():
    """SCALE_RETRY_AFTER_MAX: "a longer one is clamped to it with a warning" (the clamping
    itself: tests/unit/test_retry_policy.py); here: the setting is the value the policy uses."""
    from scrapy.utils.test import get_crawler

    from scrapy_scale.outcomes.core import OutcomeCore

    core = OutcomeCore(get_crawler(settings_dict={"SCALE_RETRY_AFTER_MAX": "7.5"}))
    assert core.policy.retry_after_max == 7.5
