"""scrapy_scale.compat: every use of Scrapy's private API, checked in a real crawl, so a
Scrapy release that changes them fails here first (and not silently in a crawl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl


@pytest.mark.parametrize("scheduler", ["scrapy.core.scheduler.Scheduler", "scrapy_scale.frontier.Scheduler"])
def test_private_engine_api_as_compat_uses_it(tmp_path: Path, scheduler: str) -> None:
    out = tmp_path / "compat.json"
    settings = {
        "EXTENSIONS": {"tests.support.compat_probe.Probe": 0},
        "TEST_COMPAT_FILE": str(out),
        "SCHEDULER": scheduler,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    }
    with Testbed(hosts=1, pages=3, seed=1) as tb:
        res = run_crawl(tb, settings, tmp_path, timeout=60)
    assert res.returncode == 0, res.tail()
    seen = json.loads(out.read_text())
    assert seen["before_open"] is True
    # ExecutionEngine._slot.inprogress holds a request while its response is handled
    assert seen["in_progress"] and all(seen["in_progress"]), seen
    # ExecutionEngine._slot.nextcall.schedule() exists (wakes the engine)
    assert seen["woke"] is True
    # the engine's slot says when the spider is closing (the egress pool's waits in place end then)
    assert seen["closing_while_crawling"] is False and seen["closing_at_close"] is True, seen
    # Downloader.slots[host].active / .concurrency: a slot with as many requests as its concurrency is full
    assert seen["slot_full"] and all(seen["slot_full"]), seen
    assert seen["other_host_full"] is False
    # Downloader.active (the requests between fetch and its end) and .domain_concurrency
    assert seen["in_downloader"] and all(seen["in_downloader"]), seen
    assert seen["new_host_full_at_its_concurrency"] is True
    # the FeedExporter extension instance, and its item_scraped writes to the crawl's feeds
    assert seen["feed_exporter"] == "FeedExporter"
    assert {"probe": "written through export_to_feeds"} in res.items
    # FeedExporter.slots[i].filter.accepts: the crawl's one feed (no filter) takes a dict
    # (a feed that filters by class: tests/crawl/test_feed_resume.py, item_classes)
    assert seen["feeds_accepting"] == 1
    from scrapy.utils.misc import load_object

    cls = load_object(scheduler)
    assert seen["scheduler"] == f"{cls.__module__}.{cls.__qualname__}"
