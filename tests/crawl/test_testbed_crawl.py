"""The testbed with real `scrapy crawl catalog` subprocesses: resolver, proxies, the demo, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawl.test_testbed import get
from tests.support.crawling import ROOT, run_crawl
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl


def test_resolver_in_a_real_crawl_yields_exactly_the_catalog(tmp_path: Path) -> None:
    with Testbed(hosts=3, pages=25, seed=4, faults="500:/item/7,first=1") as tb:
        res = run_crawl(tb, {}, tmp_path, timeout=90)
        assert res.returncode == 0, res.tail()
        assert len(res.items) == len(tb.detail_urls()) == 75
        assert res.item_urls == tb.detail_urls()
        for item in res.items:
            assert item == tb.expected_item(item["url"])
        assert res.stats["item_scraped_count"] == 75
        # every request Scrapy made is in the log: robots + listing pages + details + the retries
        assert tb.count(kind="robots") == 3
        assert tb.count(kind="500") == 3
        assert len(tb.log) == 3 + 3 * 2 + 75 + 3
        assert res.stats["downloader/response_count"] == len(tb.log)
        assert all(r.egress is None for r in tb.log)


def test_every_reset_reaches_the_crawler_on_reused_connections(tmp_path: Path) -> None:
    """One connection at a time, so every request but the first goes out on a reused
    keep-alive connection, where Twisted's pool re-sends a request silently when the
    connection is reset before any byte of an answer. The testbed's reset sends the start
    of an answer first, so each reset it plays is a failed attempt the crawler counts."""
    with Testbed(hosts=1, pages=12, seed=2, faults="reset:/item/*,first=1") as tb:
        res = run_crawl(
            tb, {"CONCURRENT_REQUESTS": 1, "SCALE_RETRY_POLICY": {"transient": {"base": 0.05}}}, tmp_path, timeout=90
        )
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()
        resets = tb.count(kind="reset")
        assert resets == 12
        assert max(r.conn for r in tb.log) < len(tb.log)  # connections were reused
        assert res.stats["downloader/exception_count"] == resets
        assert res.stats["scale/retry/transient"] == resets
        assert res.stats["downloader/response_count"] == len(tb.log) - resets


def test_every_reset_reaches_the_crawler_through_a_proxy(tmp_path: Path) -> None:
    """The same through a forward proxy (one pooled keep-alive connection to it): the
    flaky proxy's own resets and the target's resets it passes on are all failed
    attempts the crawler counts."""
    with Testbed(
        hosts=1, pages=12, seed=2, faults="reset:/item/1*,first=1", proxies=[ProxySpec("p1", mode="flaky", p=0.3)]
    ) as tb:
        res = run_crawl(
            tb,
            {"CONCURRENT_REQUESTS": 1, "SCALE_RETRY_POLICY": {"transient": {"retries": 10, "base": 0.05}}},
            tmp_path,
            timeout=90,
            env={"http_proxy": tb.proxy_urls[0], "no_proxy": ""},
        )
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()
        target_resets = tb.count(kind="reset")
        proxy_resets = [e.outcome for e in tb.proxy_log].count("reset")
        assert target_resets == 4 and proxy_resets >= 1, (target_resets, proxy_resets)
        assert res.stats["downloader/exception_count"] == target_resets + proxy_resets
        assert res.stats["scale/retry/transient"] == target_resets + proxy_resets


def test_crawl_through_a_proxy(tmp_path: Path) -> None:
    with Testbed(hosts=2, pages=10, proxies=[ProxySpec("p1", mode="auth")]) as tb:
        res = run_crawl(tb, {}, tmp_path, timeout=90, env={"http_proxy": tb.proxy_urls[0], "no_proxy": ""})
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()
        assert {r.egress for r in tb.log} == {"p1"}
        assert "secret" not in res.log  # the proxy password stays out of the log


def test_demo_crawl_starts_its_own_testbed(tmp_path: Path) -> None:
    res = run_crawl(None, {}, tmp_path, timeout=90, extra_args=["-a", "hosts=2", "-a", "pages=30"])
    assert res.returncode == 0, res.tail()
    # default faults: everything comes back after retries except shop1's /item/60 (not in 30 pages)
    assert len(res.items) == 60
    assert {i["url"].split("/")[2].split(":")[0] for i in res.items} == {"shop1.example.test", "shop2.example.test"}
    assert "No target given: started a testbed" in res.log
    assert "Testbed served" in res.log


@pytest.mark.paced
def test_cli_prints_urls_and_settings_until_interrupted(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scrapy_scale.testbed",
            "--hosts",
            "2",
            "--pages",
            "30",
            "--seed",
            "5",
            "--faults",
            "429:/item/3,retry_after=2",
            "--proxy",
            "p1:healthy",
            "--state-file",
            str(state),
            "--summary-file",
            str(tmp_path / "summary.json"),
            "--log-file",
            str(tmp_path / "log.jsonl"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + hang_guard(20)
        while not state.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.05)
        info = json.loads(state.read_text())
        assert info["hosts"] == ["shop1.example.test", "shop2.example.test"]
        assert len(info["start_urls"]) == 2 and info["settings"]["TESTBED_HOSTS"]
        port = info["port"]
        tb = Testbed.view(state)
        assert tb.port == port and tb.start_urls == info["start_urls"]
        assert len(tb.detail_urls()) == 60
        assert get(tb, 1, "/item/3")[0] == 429
        assert get(tb, 1, "/item/4")[0] == 200
        assert info["proxy_urls"][0].startswith("http://127.0.0.1:")
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=hang_guard(10))
    assert proc.returncode == 0, out
    assert "shop1.example.test" in out and "TWISTED_DNS_RESOLVER" in out
    assert "served 2 requests" in out
    assert not os.path.exists(state)  # removed on exit
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "requests": 2,
        "kinds": {"429": 1, "ok": 1},
        "statuses": {"429": 1, "200": 1},
        "connections": 2,  # get() opens a connection per request
    }
    recs = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [(r["path"], r["status"], r["egress"]) for r in recs] == [("/item/3", 429, None), ("/item/4", 200, None)]


def test_https_crawl_through_connect_proxy(tmp_path: Path) -> None:
    with Testbed(hosts=2, pages=10, tls=True, proxies=[ProxySpec("p1"), ProxySpec("p2", mode="auth")]) as tb:
        res = run_crawl(tb, {}, tmp_path, timeout=90, env={"https_proxy": tb.proxy_urls[1], "no_proxy": ""})
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()
        assert {r.egress for r in tb.log} == {"p2"}
        assert {e.method for e in tb.proxy_log} == {"CONNECT"}
