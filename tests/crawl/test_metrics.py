"""The metrics: the subscriber counts what the stats count, bounded per-domain series,
the export settings and their failure modes, the progress arithmetic."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from scrapy.utils.test import get_crawler

from scrapy_scale.config import ScaleSettingError
from scrapy_scale.monitor.export import MetricsServer
from scrapy_scale.monitor.extension import MetricsExtension
from scrapy_scale.monitor.metrics import CrawlMetrics
from scrapy_scale.testbed import Testbed
from tests.crawl.test_outcome_bus import PLAN
from tests.crawl.test_retry_crawl import FAST
from tests.support.crawling import run_crawl
from tests.unit.test_metrics_subscriber import C, by_label, samples

pytestmark = pytest.mark.crawl


def test_a_port_range_takes_the_next_free_port_and_fails_naming_the_setting_when_full() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        server = MetricsServer(CrawlMetrics("j", "s", "w").registry(), "127.0.0.1", (port, port + 20))
        try:
            assert port < server.start() <= port + 20
        finally:
            server.stop()
        crawler = get_crawler(settings_dict={"SCALE_METRICS_PORT": port})
        with pytest.raises(ScaleSettingError, match=f"^SCALE_METRICS_PORT: no free port in {port} "):
            MetricsExtension.from_crawler(crawler)
    finally:
        taken.close()


def test_a_faulty_crawl_s_final_textfile_matches_its_stats(tmp_path: Path) -> None:
    """Every class of the outcome bus's plan, counted by the metrics as by the stats."""
    prom = tmp_path / "final.prom"
    settings = {
        "SCALE_METRICS_TEXTFILE": str(prom),
        "SCALE_METRICS_INTERVAL": 0.5,
        "SCALE_CRITICAL_FIELDS": ["price"],
        "SCALE_FAILURE_RULES": [{"css": "#challenge-form", "class": "blocked", "reason": "challenge"}],
        "SCALE_RETRY_POLICY": FAST,
        "SCALE_PROGRESS_INTERVAL": 0.5,
    }
    with Testbed(hosts=2, pages=20, seed=5, faults=PLAN, robots_disallow=["/item/9"]) as tb:
        res = run_crawl(tb, settings, tmp_path, timeout=120)
    assert res.returncode == 0, res.tail()
    st = res.stats
    smp = samples(prom.read_text())
    seen_classes = set()
    for cls in C:
        got = by_label(smp, "scrapy_scale_requests_total", "class").get(cls.value, 0)
        assert got == st.get(f"scale/outcome/{cls.value}", 0), cls
        assert by_label(smp, "scrapy_scale_retries_total", "class").get(cls.value, 0) == st.get(
            f"scale/retry/{cls.value}", 0
        ), cls
        if got:
            seen_classes.add(cls.value)
    assert {"ok", "not_found", "transient", "parse_failed", "blocked", "fatal"} <= seen_classes
    assert smp[("scrapy_scale_items_stored_total", ())] == st["item_scraped_count"]
    # the validation pipeline (SCALE_CRITICAL_FIELDS) offers its figures; the metrics read them
    assert smp[("scrapy_scale_items_validated_total", ())] == st["scale/quality/validated"]
    assert smp[("scrapy_scale_items_quarantined_total", ())] == st.get("scale/quality/quarantined", 0)
    depth = {int(k.rsplit("/", 1)[1]): v for k, v in st.items() if k.startswith("scale/retry_depth/")}
    assert smp[("scrapy_scale_request_attempts_sum", ())] == sum(a * n for a, n in depth.items())
    queue = by_label(smp, "scrapy_scale_queue_requests", "state")
    assert queue["done"] + queue["failed"] == sum(by_label(smp, "scrapy_scale_requests_total", "class").values())
    assert queue["pending"] == queue["leased"] == queue["delayed"] == 0
    assert "progress: " in res.log and " pages/min, " in res.log


def test_the_egress_pool_and_its_failures_are_exported(tmp_path: Path) -> None:
    """The egress middleware registers itself as ScaleContext.egress_pool: its
    pool by state and the failed attempts through egresses reach the metrics."""
    from scrapy_scale.testbed import ProxySpec

    prom = tmp_path / "final.prom"
    with Testbed(hosts=2, pages=20, proxies=[ProxySpec("p1"), ProxySpec("p2", mode="dead")]) as tb:
        res = run_crawl(
            tb,
            {
                "SCALE_METRICS_TEXTFILE": str(prom),
                "SCALE_METRICS_INTERVAL": 0.5,
                "SCALE_EGRESSES": tb.proxy_urls,
                # robots.txt downloads are Scrapy's own (internal outcomes, not in these metrics):
                # with them on, the dead proxy could spend its failures on them alone and be
                # evicted before any crawl request drew it (CI saw 3 refusals, 0 counted)
                "ROBOTSTXT_OBEY": False,
            },
            tmp_path,
        )
    assert res.returncode == 0, res.tail()
    assert not any(k.startswith("scale/internal/") for k in res.stats), res.stats
    smp = samples(prom.read_text())
    pool = by_label(smp, "scrapy_scale_egress_pool_size", "state")
    assert sum(pool.values()) == 2, pool
    # every crawl attempt went through an egress
    assert smp[("scrapy_scale_egress_attempts_total", ())] == st_attempts(res.stats) > 0
    failures = by_label(smp, "scrapy_scale_egress_failures_total", "class")
    assert (
        failures.get("egress_failed", 0)
        == res.stats.get("scale/retry/egress_failed", 0) + res.stats.get("scale/outcome/egress_failed", 0)
        > 0
    )


def st_attempts(stats: dict) -> int:
    """Attempts of crawl requests: final outcomes plus retried attempts, over the classes."""
    return sum(stats.get(f"scale/{kind}/{c.value}", 0) for c in C for kind in ("outcome", "retry"))
