"""Issue 33 item 4 through real nginx and tinyproxy: sites that limit each client address
(``limit_req``: one with 429 and ``Retry-After``, one with nginx's own 503), three egresses
each with its own outgoing address. A page the site refuses through one route carries that
egress with its retry (``scale_refused_via``), and the egress pool holds a sibling route at the
pace that was refused until a sibling has room or the refused route's own pace comes
(scrapy_scale/throttle/routing.py ``RouteLearner.crowded``): every retry reaches the pool
with that egress, every page is crawled once, and the refusals stay few."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_real_proxies import every_page_once
from tests.support.crawling import start_crawl
from tests.support.real_servers import RealSites, Site, Tinyproxy

pytestmark = pytest.mark.crawl

SITES = [
    Site("a", "127.0.1.1", pages=60, per_page=20, rate=3, retry_after=1),
    Site("b", "127.0.1.2", pages=60, per_page=20, rate=4, limit_status=503),
]


def test_a_refused_pages_retry_waits_for_a_sibling_route_with_room(tmp_path: Path) -> None:
    with (
        RealSites(tmp_path / "nginx", SITES) as web,
        Tinyproxy(tmp_path / "tp1", out="127.0.2.1") as tp1,
        Tinyproxy(tmp_path / "tp2", out="127.0.2.2") as tp2,
        Tinyproxy(tmp_path / "tp3", out="127.0.2.3") as tp3,
    ):
        s: dict[str, Any] = {
            "SCALE_EGRESSES": [p.url for p in (tp1, tp2, tp3)],
            "SCALE_OUTCOME_LOG": str(tmp_path / "outcomes.jsonl"),
            "CONCURRENT_REQUESTS": 8,
            # the defaults, as a crawl runs (the test helper turns late retries off): a page
            # nginx's 503 refused through all three routes in a row gets its late retry
            "SCALE_RETRY_LATE": {},
        }
        res = start_crawl(None, s, tmp_path, start_urls=web.start_urls).finish(timeout=120)
        expected = web.detail_urls()
        served = web.requests()
    outs = every_page_once(res, expected, tmp_path / "outcomes.jsonl")
    # the sites refused pages for the rate, and each retry reached the egress pool carrying
    # the egress it was refused through (through the scheduler and the frontier, which drop
    # the attempt's own egress): what the route gate's hold needs (its rule: the unit tests,
    # tests/unit/test_throttle_refused_retry.py)
    retried = [o for o in outs if o["status"] in (429, 503) and not o["final"] and "/robots.txt" not in o["url"]]
    assert retried, "no refusal: the limits were never met, the test proves nothing"
    assert res.stats.get("scale/egress/refused_retries", 0) == len(retried), res.stats
    # few refusals while three routes a site learn its per-address limit
    pages = [r for r in served if r["path"] != "/robots.txt"]
    refusals = [r for r in pages if r["status"] in (429, 503)]
    assert len(refusals) <= 0.25 * len(pages), (len(refusals), len(pages))
    assert "Traceback" not in res.log, res.tail()
