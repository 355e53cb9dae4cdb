"""Browser contexts bound to egresses: Chromium (Debian's package) through scrapy-playwright."""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawling import run_crawl

pytest.importorskip("scrapy_playwright")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium package")

BROWSER = {
    "SPIDER_MODULES": ["tests.egress_browser_spiders"],
    "DOWNLOAD_HANDLERS": {
        "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
        "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
    },
    "PLAYWRIGHT_BROWSER_TYPE": "chromium",
    "PLAYWRIGHT_LAUNCH_OPTIONS": {
        "executable_path": CHROMIUM,
        "headless": True,
        "args": ["--no-sandbox", "--headless=new", "--disable-gpu"],
    },
    "ROBOTSTXT_OBEY": False,
    "CONCURRENT_REQUESTS": 4,
    "SCALE_RETRY_POLICY": {"egress_failed": {"retries": 2}},
}


def _crawl(tb, tmp_path, **args):
    s = dict(BROWSER, SCALE_EGRESSES=tb.proxy_urls, SCALE_OUTCOME_LOG=str(tmp_path / "outcomes.jsonl"))
    extra = [x for k, v in args.items() for x in ("-a", f"{k}={v}")]
    res = run_crawl(tb, s, tmp_path, spider="browser_catalog", timeout=240, extra_args=extra)
    outs = [json.loads(line) for line in (tmp_path / "outcomes.jsonl").read_text().splitlines()]
    return res, outs


def test_each_context_goes_out_through_its_own_proxy_and_pages_are_closed(tmp_path):
    proxies = [ProxySpec("p1"), ProxySpec("p2"), ProxySpec("p3", mode="auth", user="u", password="Br0wserPW")]
    with Testbed(hosts=2, pages=12, seed=6, proxies=proxies, per_page=6) as tb:
        res, outs = _crawl(tb, tmp_path, raise_on="3")
        assert res.returncode == 0, res.tail()
        served = defaultdict(set)
        for r in tb.log:
            served[(r.host, r.path)].add(r.egress)
        to_proxy = {f"127.0.0.1:{port}": pid for pid, port in tb.proxy_ports.items()}
    to_proxy.update({e: to_proxy[e.split("~")[0]] for e in {o["egress"] for o in outs} if "~" in e})
    ok = [o for o in outs if o["final"] and o["cls"] == "ok"]
    assert len(ok) >= 10
    used = set()
    for o in ok:
        host, path = o["url"].split("://")[1].split(":")[0], "/" + o["url"].split("/", 3)[3]
        assert served[(host, path)] == {to_proxy[o["egress"]]}, (o["url"], served[(host, path)])
        used.add(o["egress"])
    assert len(used) == 3  # every egress carried pages, the authenticated one too
    assert res.stats["scale/egress/browser/contexts_max"] >= 1
    assert res.stats["scale/egress/browser/contexts"] == 0  # the gauge is back to 0 at close
    raised = [o for o in outs if o["final"] and o["reason"] == "callback raised ValueError"]
    assert len(raised) == 2  # /item/3 of each host
    assert res.stats["test/kept_pages"] == 2 and res.stats["test/kept_pages_open"] == 0
    assert "Br0wserPW" not in res.log and "Br0wserPW" not in (tmp_path / "outcomes.jsonl").read_text()
    for f in (f for f in (tmp_path / "state").rglob("*") if f.is_file()):
        assert b"Br0wserPW" not in f.read_bytes()


def test_a_context_that_cannot_start_moves_its_request_to_another_egress(tmp_path):
    proxies = [ProxySpec("p1", mode="auth", user="u", password="Ctx0PW"), ProxySpec("p2"), ProxySpec("p3")]
    with Testbed(hosts=1, pages=3, seed=6, proxies=proxies) as tb:
        res, outs = _crawl(tb, tmp_path, bad_context="1")
        assert res.returncode == 0, res.tail()
    root = [o for o in outs if o["url"].endswith("/")]
    assert [o["cls"] for o in root] == ["egress_failed"] * 3
    assert "browser context for egress" in root[0]["reason"] or root[0]["reason"] == "proxy tunnel"
    assert len({o["egress"] for o in root}) == 3  # each retry went through another egress
    assert root[0]["avoid_egress"] == [root[0]["egress"]]
    assert res.stats["scale/egress/browser/failed_starts"] == 3
    # the retries went back to the frontier without the context's proxy password
    for f in (f for f in (tmp_path / "state").rglob("*") if f.is_file()):
        assert b"Ctx0PW" not in f.read_bytes()
    assert "Ctx0PW" not in res.log
