"""A robots.txt ``Crawl-delay`` holds where the site sees it, through a path that delays
some sends by up to 0.5 s (the testbed's ``jitter`` proxies).

Arrival times come from the testbed's request log (at the site), never from the crawler.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.support.crawling import run_crawl

pytestmark = [pytest.mark.crawl, pytest.mark.paced]

#: two proxies that each hold half of their requests back a random 0-0.5 s
JITTERY = [ProxySpec(f"j{i}", mode="jitter", p=0.5, delay=0.5) for i in (1, 2)]


def test_a_crawl_delay_holds_at_the_site_through_a_jittery_path(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=12, per_page=20, seed=7, proxies=JITTERY, robots_crawl_delay=1) as tb:
        settings = {
            "SCALE_EGRESSES": tb.proxy_urls,
            "ROBOTSTXT_OBEY": True,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
            "SCALE_DOMAIN_PROFILES": {"default": {"start_delay": 0.0}},
        }
        res = run_crawl(tb, settings, tmp_path, timeout=120)
        log = sorted(tb.log, key=lambda r: r.time)
        held = [e for e in tb.proxy_log if e.outcome == "held"]
    assert res.returncode == 0, res.tail()
    assert len(res.items) == 12
    # the path did delay sends: requests were held back, some by a good part of 0.5 s
    waits = [next(r.time for r in log if r.path == urlsplit(e.target).path and r.time >= e.time) - e.time for e in held]
    assert len(held) >= 3 and max(waits) >= 0.2, (len(held), waits)
    # the pages after the first (robots.txt is fetched just before the first one, outside the
    # scheduler: docs/throttle.md, Limits): every gap at the site is the Crawl-delay or more
    pages = [r.time for r in log if r.kind != "robots"]
    gaps = [b - a for a, b in zip(pages, pages[1:], strict=False)]
    print(f"gaps at the site under Crawl-delay 1 s: min {min(gaps):.3f} s, {len(held)} sends held back")
    assert len(pages) == 13 and min(gaps) >= 1.0, gaps
