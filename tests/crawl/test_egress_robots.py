"""Never out without a proxy: robots.txt (a Scrapy download that does not go through the
scheduler) and every crawl request leave through an egress of the pool, and a request
that must wait for one waits without spinning (issue 35, part 1)."""

from __future__ import annotations

import re
import resource
from collections import Counter
from typing import Any

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawl.test_egress_crawl import _wait_for
from tests.support.crawling import CrawlResult, start_crawl

pytestmark = pytest.mark.crawl


def _crawl_with_cpu(proc: Any, timeout: float, between: Any = None) -> tuple[CrawlResult, float]:
    """Finish ``proc`` and return its result and the CPU seconds (user + system) it used:
    the test process's reaped children's rusage, before and after (its only child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if between is not None:
        between()
    res = proc.finish(timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return res, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _by_proxy(s: Any) -> bool:
    """Did this request reach the site through a proxy? Testbed proxies (of any testbed)
    connect to targets from 127.254.0.x (docs/testbed.md), the crawler from 127.0.0.1."""
    return s.client.startswith("127.254.")


def _direct(tb: Testbed) -> list[Any]:
    return [s for s in tb.log if not _by_proxy(s)]


def _robots_by_proxy(tb: Testbed) -> Counter[str]:
    return Counter(s.host for s in tb.log if s.path == "/robots.txt" and _by_proxy(s) and s.status == 200)


def test_healthy_proxies_every_request_leaves_through_one_without_spinning(tmp_path):
    # the crawl: 8 hosts x 30 pages, 3 healthy proxies, 1 worker, no faults
    proxies = [ProxySpec("p1"), ProxySpec("p2"), ProxySpec("p3")]
    with Testbed(hosts=8, pages=30, seed=7, proxies=proxies) as tb:
        proc = start_crawl(tb, {"SCALE_EGRESSES": tb.proxy_urls, "CONCURRENT_REQUESTS": 8}, tmp_path)
        res, cpu = _crawl_with_cpu(proc, 120)
        direct = _direct(tb)
        robots = _robots_by_proxy(tb)
    assert res.returncode == 0, res.tail()
    assert res.item_urls == tb.detail_urls()
    assert not direct, f"{len(direct)} requests reached a site without a proxy: {direct[:5]}"
    assert set(robots) == set(tb.hosts), robots  # every site's robots.txt, through a proxy
    # before: 63,825-69,270 bounces in the guard, 7.1-7.4 s of CPU in a 10 s crawl
    assert res.stats.get("scale/retry/not_before_guard", 0) <= 20, res.stats.get("scale/retry/not_before_guard")
    assert cpu < max(4.0, 0.6 * res.duration), (cpu, res.duration)


def test_every_proxy_dead_for_a_while_then_one_recovers(tmp_path):
    # the pool's two proxies belong to a second testbed, stopped at first (connections
    # refused): every request, robots.txt first, finds no egress until "back" serves again
    # (its hosts: the same names, so its proxies know where they are)
    with Testbed(hosts=2, pages=1, seed=1, proxies=[ProxySpec("back"), ProxySpec("gone")]) as other:
        back, gone = other.proxy_url("back"), other.proxy_url("gone")
    with Testbed(hosts=2, pages=10, seed=3, proxies=[]) as tb:
        s = {
            "SCALE_EGRESSES": [back, gone],
            "SCALE_EGRESS_MIN_FAILURES": 1,
            "SCALE_EGRESS_QUARANTINE": 2.0,
            "SCALE_EGRESS_QUARANTINE_MAX": 4.0,
            "CONCURRENT_REQUESTS": 4,
            # the re-probes of the dead proxies fail robots.txt and the pages too: enough
            # retries to outlast the outage (a request waiting for an egress spends none)
            "SCALE_RETRY_POLICY": {"egress_failed": {"retries": 40}},
        }
        proc = start_crawl(tb, s, tmp_path)
        log = proc.run_dir / "crawl.log"
        back_id = back.split("//")[1]

        def outage() -> None:
            # both quarantined, and the requests waiting long enough to have spun
            _wait_for(log, r"waits until .*every egress is quarantined", proc)
            _wait_for(
                log,
                rf"egress {re.escape(back_id)} quarantined again(.|\n)*{re.escape(back_id)} quarantined again",
                proc,
            )
            other.start()  # "back" serves again on its port ("gone" stays refused)

        try:
            res, cpu = _crawl_with_cpu(proc, 240, outage)
        finally:
            other.stop()
        direct = _direct(tb)
        robots = _robots_by_proxy(tb)
    assert res.returncode == 0, res.tail()
    assert res.item_urls == tb.detail_urls()
    assert not direct, f"{len(direct)} requests reached a site without a proxy: {direct[:5]}"
    assert set(robots) == set(tb.hosts), robots
    assert "egress: robots.txt" not in res.log or "sent direct" not in res.log
    # before: 7.2 s of CPU in a 60 s crawl (the guard's bounces) and robots.txt went direct
    assert res.stats.get("scale/retry/not_before_guard", 0) <= 20, res.stats.get("scale/retry/not_before_guard")
    assert cpu < max(4.0, 0.25 * res.duration), (cpu, res.duration)
