"""A site that denies one proxy's address (nginx ``deny``, 403 through that proxy only) while
every other route gets 200: the 403 is that egress's failure at that site
(``RouteBlocks.only`` in scrapy_scale/outcomes/noise.py), not the page's nor the site's.
Real nginx and three real tinyproxy egresses, each binding its own outgoing address: every
page is crawled once, the denied route is quarantined for that site and not used there
again, the same egress goes on serving another site, and the site is never held as
blocked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.crawl.test_egress_crawl import FAST
from tests.crawl.test_real_proxies import every_page_once
from tests.support.crawling import start_crawl
from tests.support.real_servers import RealSites, Site, Tinyproxy

pytestmark = pytest.mark.crawl

MIN_FAILURES = 3
CONCURRENCY = 4
DENIED = "127.0.2.3"  # the third tinyproxy's outgoing address
SITES = [
    Site("a", "127.0.1.1", pages=40, per_page=10, deny=(DENIED,)),
    Site("b", "127.0.1.2", pages=20, per_page=10),
]


def test_a_site_that_denies_one_proxy_crawls_every_page_through_the_others(tmp_path: Path) -> None:
    with (
        RealSites(tmp_path / "nginx", SITES) as web,
        Tinyproxy(tmp_path / "tp1", out="127.0.2.1") as tp1,
        Tinyproxy(tmp_path / "tp2", out="127.0.2.2") as tp2,
        Tinyproxy(tmp_path / "tp3", out=DENIED) as tp3,
    ):
        s: dict[str, Any] = {
            "SCALE_EGRESSES": [p.url for p in (tp1, tp2, tp3)],
            "SCALE_OUTCOME_LOG": str(tmp_path / "outcomes.jsonl"),
            "CONCURRENT_REQUESTS": CONCURRENCY,
            "SCALE_RETRY_POLICY": FAST,
            "SCALE_EGRESS_MIN_FAILURES": MIN_FAILURES,
            "SCALE_EGRESS_QUARANTINE": 600,  # no re-probe within the crawl
        }
        res = start_crawl(None, s, tmp_path, start_urls=web.start_urls).finish(timeout=120)
        expected = web.detail_urls()
        served = web.requests()
    outs = every_page_once(res, expected, tmp_path / "outcomes.jsonl")
    denied = tp3.url.removeprefix("http://")
    # site a answered tp3's address 403 only, and few times: its route was quarantined for
    # site a (after MIN_FAILURES egress failures, plus those in flight then) and not used again
    at_a = [r for r in served if r["host"] == "127.0.1.1" and r["client"] == DENIED]
    assert at_a and {r["status"] for r in at_a} == {403}, at_a
    assert len(at_a) <= 1 + MIN_FAILURES + CONCURRENCY, len(at_a)
    assert f"egress {denied} quarantined for 127.0.1.1 until" in res.log, res.tail()
    assert res.stats.get("scale/egress/evictions_domain", 0) >= 1
    assert not res.stats.get("scale/egress/evictions"), res.stats  # the egress itself is healthy
    last_403 = max(r["t"] for r in at_a)
    later_a = [r for r in served if r["host"] == "127.0.1.1" and r["t"] > last_403]
    assert later_a and DENIED not in {r["client"] for r in later_a}  # not used there again
    # every 403 was blamed on the egress at that site; those after the first were retried in
    # the egress's budget (the first is the page's block: no other answer through tp3 at site
    # a had been a block yet)
    mine = [o for o in outs if o["egress"] == denied and o["domain"] == "127.0.1.1"]
    pages = [r for r in at_a if r["path"] != "/robots.txt"]  # Scrapy's own download has no outcome
    assert len(mine) == len(pages) and {o["blame"] for o in mine} == {"egress_domain"}, mine
    assert res.stats.get("scale/retry/as_egress_failure", 0) >= max(1, len(mine) - 1), res.stats
    # the same egress went on serving site b, which does not deny it
    at_b = Counter(r["status"] for r in served if r["host"] == "127.0.1.2" and r["client"] == DENIED)
    assert at_b[200] > 0 and set(at_b) == {200}, at_b
    # the site was never held as blocked on every route
    assert not res.stats.get("scale/throttle/blocked_waits"), res.stats
    assert "blocked on every route" not in res.log, res.tail()
