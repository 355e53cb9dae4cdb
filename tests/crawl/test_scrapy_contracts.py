"""Contracts of Scrapy's own tests that the frontier must keep, on both backends and, for
reference, with plain Scrapy: a ``download_slot`` with a ``DOWNLOAD_SLOTS`` delay spaces
its requests by that delay (Scrapy's downloader-slots test), and a ``spider_idle``
handler that raises ``DontCloseSpider`` once is called twice (Scrapy's
``TestSpiderIdle.test_dont_close_spider``). Real `scrapy crawl` runs against the testbed;
spiders in tests/support/contract_spiders.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crawling import run_crawl
from tests.support.spacing import spacing_problems

pytestmark = pytest.mark.crawl

SPIDERS = {"SPIDER_MODULES": ["tests.support.contract_spiders"], "LOG_LEVEL": "INFO"}


@pytest.fixture(params=["plain", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The settings of one run: plain Scrapy (no add-on), or the add-on with the frontier
    on SQLite or on Redis (its keys deleted afterwards by redis_prefix)."""
    if request.param == "plain":
        return {**SPIDERS, "ADDONS": {}}
    if request.param == "redis":
        url, job = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return {**SPIDERS, "SCALE_FRONTIER_URL": url, "SCALE_JOB": job}
    return {**SPIDERS, "SCALE_FRONTIER_URL": f"sqlite:///{tmp_path}/state/frontier.db"}


@pytest.mark.paced
@pytest.mark.timeout(180)
def test_a_named_download_slot_keeps_its_download_slots_delay(tmp_path: Path, backend: dict[str, Any]) -> None:
    """Four pages in one slot named by ``meta["download_slot"]`` with a 2 s delay (three
    start requests, one found by a callback; robots.txt on with the add-on): they go out
    2 s apart on average, as with Scrapy (1.99 s); issue 31 measured 4-5 s with the frontier."""
    with Testbed(hosts=1, pages=4, seed=1) as tb:
        res = run_crawl(tb, backend, tmp_path, spider="slot_delay", timeout=120)
        assert res.returncode == 0, res.tail()
        sent = sorted(r.time for r in tb.log if r.path.startswith("/item/"))
    assert len(sent) == 4 and {i["slot"] for i in res.items} == {"shop-slot"}, res.tail()
    gaps = [round(b - a, 2) for a, b in zip(sent, sent[1:], strict=False)]
    # the delay is kept between sends: one arrival made late by a loaded machine narrows its
    # neighbour's gap (plain Scrapy in CI: 2.19 s then 1.83 s at load 27; the first arrival
    # 0.38 s late, gaps 1.62, 2.0, 2.0, in another), so any two arrivals k sends apart are
    # k delays apart less one arrival's 0.5 s; with no delay the gaps are near 0
    assert not spacing_problems(sent, 2.0, jitter=0.5, mean_share=0), gaps
    assert (sent[-1] - sent[0]) / (len(sent) - 1) <= 2.6 and all(g <= 2.9 for g in gaps), gaps


@pytest.mark.timeout(120)
def test_a_spider_idle_handler_is_called_as_often_as_under_scrapy(tmp_path: Path, backend: dict[str, Any]) -> None:
    """The handler crawls page 2 and raises DontCloseSpider at its first call, and lets the
    spider close at its second: two calls, reason finished. With the frontier it was
    called a third time (its own idle handler raised DontCloseSpider once more to finish
    the run)."""
    report = tmp_path / "report.jsonl"
    with Testbed(hosts=1, pages=2, seed=1) as tb:
        res = run_crawl(tb, backend, tmp_path, spider="idle_once", timeout=90, extra_args=["-a", f"report={report}"])
        assert res.returncode == 0, res.tail()
    calls = [json.loads(line)["call"] for line in report.read_text().splitlines()]
    assert calls == [1, 2], calls
    assert res.stats["finish_reason"] == "finished"
    assert sorted(i["url"].rsplit("/", 1)[1] for i in res.items) == ["1", "2"]
