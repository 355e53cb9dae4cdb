"""Browser contexts bound to egresses: Chromium (Debian's package) through scrapy-playwright."""

from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.support import system_tools
from tests.support.crawling import run_crawl

pytest.importorskip("scrapy_playwright")
pytestmark = pytest.mark.crawl

BROWSER = {
    "SPIDER_MODULES": ["tests.support.egress_browser_spiders"],
    "DOWNLOAD_HANDLERS": {
        "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
        "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
    },
    "PLAYWRIGHT_BROWSER_TYPE": "chromium",
    "ROBOTSTXT_OBEY": False,
    "CONCURRENT_REQUESTS": 4,
    "SCALE_RETRY_POLICY": {"egress_failed": {"retries": 2}},
}


def browser() -> dict:
    """BROWSER with Debian's chromium; without it the test fails with the one reason of
    tests/support/system_tools.py, as every test that needs a program does."""
    launch = {"headless": True, "args": ["--no-sandbox", "--headless=new", "--disable-gpu"]}
    return dict(BROWSER, PLAYWRIGHT_LAUNCH_OPTIONS={"executable_path": system_tools.need("chromium"), **launch})


def _crawl(tb, tmp_path, settings=None, **args):
    s = dict(browser(), SCALE_EGRESSES=tb.proxy_urls, SCALE_OUTCOME_LOG=str(tmp_path / "outcomes.jsonl"))
    s.update(settings or {})
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


def test_a_dead_and_a_garbage_proxy_lose_no_browser_page_and_count_against_the_proxies(tmp_path):
    """Page loads through a refused proxy are egress_failed (Chromium's
    ERR_PROXY_CONNECTION_FAILED), through a proxy that answers garbage transient; either
    way the page moves to another egress, and the failures count against the proxy."""
    proxies = [ProxySpec("ok"), ProxySpec("dead", mode="dead"), ProxySpec("garbage", mode="garbage")]
    with Testbed(hosts=3, pages=12, seed=6, proxies=proxies, per_page=6) as tb:
        res, outs = _crawl(tb, tmp_path)
        assert res.returncode == 0, res.tail()
        eid = {pid: f"127.0.0.1:{port}" for pid, port in tb.proxy_ports.items()}
    final = [o for o in outs if o["final"]]
    assert len(final) == 21 and {o["cls"] for o in final} == {"ok"}, [o for o in final if o["cls"] != "ok"]
    tries = [o for o in outs if not o["final"]]
    by = {pid: [o for o in tries if o["egress"] == e] for pid, e in eid.items()}
    assert by["dead"] and {o["cls"] for o in by["dead"]} == {"egress_failed"}
    assert {o["reason"] for o in by["dead"]} == {"browser ERR_PROXY_CONNECTION_FAILED"}
    assert by["garbage"] and {o["cls"] for o in by["garbage"]} == {"transient"}
    for o in tries:  # the retry avoids the egress that failed it
        assert o["egress"] in o["avoid_egress"], o
    assert res.stats[f"scale/egress/by/{eid['dead']}/failed/egress_failed"] == len(by["dead"])
    if len(by["dead"]) >= 3:  # SCALE_EGRESS_MIN_FAILURES: page loads evict the proxy
        assert f"egress {eid['dead']} quarantined until" in res.log
    assert "scale/outcome/fatal" not in res.stats


def test_a_retry_does_not_reuse_the_page_its_failed_attempt_kept(tmp_path):
    """Every item request keeps its page (``playwright_include_page``), which
    scrapy-playwright puts in the request's meta before the page loads, and reuses for a
    request whose meta holds an open page. A retry is a copy of the failed attempt's
    request: it carried that page (in the failed attempt's context: the egress it had to
    avoid), which the frontier cannot store, and the crawl stalled with the retries in
    flight. Each retry gets a page of the context the pool assigns; the failed attempt's
    page is closed at its outcome."""
    proxies = [ProxySpec("ok"), ProxySpec("dead", mode="dead")]
    with Testbed(hosts=3, pages=12, seed=6, proxies=proxies, per_page=6) as tb:
        # never quarantined: its contexts stay open (an evicted one closes, and its pages)
        res, outs = _crawl(tb, tmp_path, {"SCALE_EGRESS_MIN_FAILURES": 1000}, keep_pages="1")
        assert res.returncode == 0, res.tail()
        eid = {pid: f"127.0.0.1:{port}" for pid, port in tb.proxy_ports.items()}
    failed_items = [o for o in outs if "/item/" in o["url"] and o["egress"] == eid["dead"]]
    assert failed_items, "no item page went through the dead proxy: the retry path did not run"
    for o in outs:  # the ok proxy never fails: a failure through it is a page of the dead one
        if o["egress"] == eid["ok"]:
            assert o["cls"] == "ok", o
    final = [o for o in outs if o["final"]]
    assert len(final) == 21  # nothing stalled (the avoided egress is a preference: may fail again)
    ok_items = [o for o in final if "/item/" in o["url"] and o["cls"] == "ok"]
    assert res.stats["test/kept_pages"] == len(ok_items) and res.stats["test/kept_pages_open"] == 0


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_contexts_live_in_the_handler_of_each_scheme_and_all_close(tmp_path, tls):
    """Both schemes map to scrapy-playwright: two handler objects. The pool must create,
    replace and close each context in the handler that serves the request (over http it
    drove the https one: two browsers, each context started twice, the loading contexts
    never closed until shutdown, the gauge blind to them)."""
    proxies = [ProxySpec("p1"), ProxySpec("p2"), ProxySpec("p3")]
    textfile = tmp_path / "metrics.prom"
    more = {
        "SCALE_EGRESS_CONTEXT_PAGES": 1,  # a new context for every page: replacement is exercised
        "SCALE_EGRESS_SYNC": 0.2,
        "SCALE_METRICS_TEXTFILE": str(textfile),
        "LOG_LEVEL": "DEBUG",
    }
    with Testbed(hosts=2, pages=12, seed=6, proxies=proxies, per_page=6, tls=tls) as tb:
        s = dict(browser(), SCALE_EGRESSES=tb.proxy_urls, **more)
        extra = ["-a", "ignore_tls=1"] if tls else []
        res = run_crawl(tb, s, tmp_path, spider="browser_catalog", timeout=240, extra_args=extra)
    assert res.returncode == 0, res.tail()
    assert len(res.items) == 12, res.tail()
    assert res.log.count("Launching browser chromium") == 1  # one handler served, one browser
    # the handlers' own record: every context started once and closed; the running count
    open_now = peak = 0
    started, closed = [], []
    for m in re.finditer(r"Browser context (started|closed): '(egress:[^']+)'", res.log):
        (started if m.group(1) == "started" else closed).append(m.group(2))
        open_now += 1 if m.group(1) == "started" else -1
        peak = max(peak, open_now)
    assert len(started) >= 14 and len(set(started)) == len(started), started  # never started twice
    assert sorted(started) == sorted(closed)
    # replaced contexts close while the crawl runs: at most one current per egress plus the
    # retired ones whose page is still in flight (CONCURRENT_REQUESTS), plus closes under way
    assert peak <= len(proxies) + BROWSER["CONCURRENT_REQUESTS"] + 2, peak
    # the gauge reads the handlers: its sampled peak is within the handler's own count
    assert 1 <= res.stats["scale/egress/browser/contexts_max"] <= peak
    assert res.stats["scale/egress/browser/contexts"] == 0
    final = re.search(r"^scrapy_scale_browser_contexts\{[^}]*\} (\S+)", textfile.read_text(), re.M)
    assert final and float(final.group(1)) == 0.0, textfile.read_text()  # written after the contexts closed


@pytest.mark.serial
def test_a_context_whose_close_hangs_does_not_hang_spider_close(caplog):
    """close_all() gathered every close() with no time limit: a Playwright context whose
    close never finished hung spider_closed. A fake of the handler's interface (the
    contexts in ``context_wrappers``) stands for scrapy-playwright's."""
    import asyncio
    import logging
    import time
    from types import SimpleNamespace

    from scrapy_scale.egress.browser import BrowserContexts

    class Context:
        def __init__(self, hangs: bool):
            self.hangs, self.closed, self.started = hangs, False, False

        async def close(self) -> None:
            self.started = True
            if self.hangs:
                await asyncio.Event().wait()  # never set
            self.closed = True

    hung, fine = Context(True), Context(False)
    handler = SimpleNamespace(
        context_wrappers={
            "egress:127.0.0.1:1:1": SimpleNamespace(context=hung),
            "egress:127.0.0.1:2:1": SimpleNamespace(context=fine),
        }
    )
    contexts = BrowserContexts(None, 0, 0.0, time.time)
    contexts.handlers[id(handler)] = handler
    contexts.close_timeout = 0.2
    settled = contexts.settled()

    async def close() -> float:
        t0 = time.monotonic()
        await asyncio.wait_for(contexts.close_all(), 10)  # fails the test instead of hanging it
        return time.monotonic() - t0

    with caplog.at_level(logging.WARNING, logger="scrapy_scale.egress.browser"):
        took = asyncio.run(close())
    assert hung.started and not hung.closed and fine.closed
    assert took < 5
    assert settled.called  # the metrics' final read is not held either
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "did not close within 0.2 s" in warnings[0], warnings
    assert "egress:127.0.0.1:1:1" in warnings[0] and "egress:127.0.0.1:2:1" not in warnings[0]
