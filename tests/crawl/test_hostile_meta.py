"""Hostile meta in a stored request (issue 35, part 4): a frontier record whose request
carries a ``scale_not_before`` in 2100 or of text, or a ``scale_avoid_egress`` that is a
number, is crawled, with one warning per key; nothing raises on the request path.
The records are written into the real store (SQLite file, Redis) before the crawl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request

from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.store import NewRequest
from scrapy_scale.testbed import ProxySpec, Testbed
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl

#: 2100-01-01T00:00:00Z
Y2100 = 4_102_444_800

HOSTILE = {
    "/item/1": {"scale_not_before": Y2100, "scale_attempt": 2},
    "/item/2": {"scale_not_before": "tomorrow", "scale_attempt": 2},
    "/item/3": {"scale_avoid_egress": 5, "scale_attempt": 2},
}


def _hostile_records(base: str, host: str) -> list[NewRequest]:
    out = []
    for path, m in HOSTILE.items():
        url = base + path
        data = json.dumps({"v": 2, "r": {"url": url, "callback": "parse_item", "meta": m}})
        out.append(NewRequest(codec.default_fingerprint(Request(url)), data, host, priority=10))
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_hostile_meta_in_stored_records_is_dropped_and_the_pages_crawled(
    backend: str, tmp_path: Path, request: Any
) -> None:
    if backend == "redis":
        url, job = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    else:
        url, job = f"sqlite:///{tmp_path}/state/frontier.db", "hostile"
        (tmp_path / "state").mkdir()
    with Testbed(hosts=1, pages=6, seed=5, proxies=[ProxySpec("p1")]) as tb:
        base = tb.start_urls[0].rstrip("/")
        host = base.split("//")[1].split(":")[0]
        store = open_store(url, job)
        try:
            store.begin_run()
            store.enqueue(_hostile_records(base, host))
        finally:
            store.close()
        s = {"SCALE_FRONTIER_URL": url, "SCALE_JOB": job, "SCALE_EGRESSES": tb.proxy_urls, "LOG_LEVEL": "INFO"}
        res = run_crawl(tb, s, tmp_path, timeout=120)
        store = open_store(url, job)
        try:
            counts = store.counts()
        finally:
            store.close()
        served = {r.path for r in tb.log if r.status == 200}
    assert res.returncode == 0, res.tail()
    assert "Traceback" not in res.log and "TypeError" not in res.log, res.tail()
    assert set(HOSTILE) <= served
    assert res.item_urls == tb.detail_urls()
    assert counts["done"] == len(tb.detail_urls()) + 1, counts
    assert counts["pending"] == counts["delayed"] == counts["leased"] == counts["failed"] == 0, counts
    # one warning per key, naming it and its value
    assert res.log.count("request meta scale_not_before = ") == 1, res.log
    assert res.log.count("request meta scale_avoid_egress = 5 is not a list of egress ids") == 1, res.log
