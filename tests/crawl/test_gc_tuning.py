"""The garbage-collector tuning (scrapy_scale/gc_tuning.py): what it changes, that the last
engine puts it back, the settings that turn it off, and that a real crawl runs with it."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crawling import UNPACED, run_crawl

pytestmark = pytest.mark.crawl


def test_a_real_crawl_runs_with_the_collector_tuned_and_can_turn_it_off(tmp_path: Path):
    """The add-on enables it (README settings table: SCALE_GC_FREEZE, SCALE_GC_THRESHOLD)."""
    before = gc.get_threshold()
    with Testbed(hosts=1, pages=10, seed=2) as tb:
        on = run_crawl(tb, {"LOG_LEVEL": "INFO", **UNPACED}, tmp_path / "on", timeout=90)
        off = run_crawl(
            tb,
            {"LOG_LEVEL": "INFO", "SCALE_GC_FREEZE": False, "SCALE_GC_THRESHOLD": 0, **UNPACED},
            tmp_path / "off",
            timeout=90,
        )
    assert on.returncode == 0, on.tail()
    m = re.search(
        r"garbage collector: start-up heap frozen \((\d+) objects\), generation-0 threshold 700 -> 5000", on.log
    )
    assert m, on.log[-3000:]
    assert int(m.group(1)) > 10_000  # Scrapy, Twisted and the project: far more than a handful
    assert off.returncode == 0, off.tail()
    assert "garbage collector:" not in off.log
    assert len(on.items) == len(off.items) == 10
    assert gc.get_threshold() == before  # the crawls ran in their own processes


def test_the_extension_alone_without_the_addon(tmp_path: Path):
    """README, components table: `scrapy_scale.gc_tuning.GCTuning` in EXTENSIONS works without the add-on."""
    with Testbed(hosts=1, pages=5, seed=2) as tb:
        res = run_crawl(
            tb,
            {"ADDONS": {}, "LOG_LEVEL": "INFO", "EXTENSIONS": {"scrapy_scale.gc_tuning.GCTuning": 0}},
            tmp_path,
            timeout=90,
        )
    assert res.returncode == 0, res.tail()
    assert "garbage collector: start-up heap frozen" in res.log
    assert "generation-0 threshold 700 -> 5000" in res.log
    assert len(res.items) == 5
