"""Real third-party servers: nginx sites (limit_req per client address, 429 with and
without Retry-After or nginx's 503, Crawl-delay, a deny of one proxy's address) crawled
through real tinyproxy and Squid egresses, two of them with a dead upstream that answer
every request themselves (tinyproxy ``502 Unable to connect to upstream proxy``,
Squid ``X-Squid-Error``). Those answers are the egress's failure: both are quarantined
within the bound, and every page is crawled once."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from scrapy.http import HtmlResponse, Request

from scrapy_scale.outcomes.classify import Classifier
from tests.crawl.test_egress_crawl import FAST
from tests.support.crawling import start_crawl
from tests.support.hang import hang_guard
from tests.support.real_servers import Blackhole, RealSites, Site, Squid, Tinyproxy

pytestmark = pytest.mark.crawl

MIN_FAILURES = 3
CONCURRENCY = 4
#: the stated bound (as in tests/crawl/test_egress_crawl.py): quarantined after
#: MIN_FAILURES failed attempts, plus the attempts already in flight through it then
EVICTION_BOUND = MIN_FAILURES + CONCURRENCY
#: the healthy Squid's outgoing address, which site "d" denies (nginx answers 403)
SQUID_OUT = "127.0.2.2"
SITES = [
    Site("a", "127.0.1.1", pages=12, rate=3, retry_after=1),
    Site("b", "127.0.1.2", pages=12, rate=6, limit_status=503),
    Site("c", "127.0.1.3", pages=6, crawl_delay=0.5),
    Site("d", "127.0.1.4", pages=12, rate=6, deny=(SQUID_OUT,)),
]


def _tinyproxy_attempts(p: Tinyproxy) -> int:
    """Requests tinyproxy received, from its own log."""
    text = (p.workdir / "tinyproxy.log").read_text(errors="replace")
    return len(re.findall(r"Request \(file descriptor \d+\): GET ", text))


def _squid_attempts(p: Squid) -> int:
    """Requests Squid answered, from its access log (copied out at its stop); the
    readiness check's bare connection is logged too, without a method."""
    return sum(" GET " in line for line in (p.workdir / "access.log").read_text().splitlines())


def every_page_once(res: Any, expected: set[str], outcome_log: Path) -> list[dict[str, Any]]:
    """The crawl ended well with every page of ``expected`` scraped once and no page's final
    outcome a failure; returns the outcome log's records."""
    assert res.returncode == 0, res.tail()
    urls = [i["url"] for i in res.items]
    assert set(urls) == expected and len(urls) == len(expected), res.tail()  # every page, once
    outs = [json.loads(line) for line in outcome_log.read_text().splitlines()]
    assert not [o for o in outs if o["final"] and o["cls"] != "ok"], res.tail()
    return outs


def test_proxies_whose_upstream_is_dead_are_quarantined_and_every_page_is_crawled(tmp_path: Path):
    with (
        RealSites(tmp_path / "nginx", SITES) as web,
        Tinyproxy(tmp_path / "tp-ok", out="127.0.2.1") as tp_ok,
        Squid(tmp_path / "sq-ok", out=SQUID_OUT) as sq_ok,
        Tinyproxy(tmp_path / "tp-dead", out="127.0.2.3", dead_upstream=True) as tp_dead,
        Squid(tmp_path / "sq-dead", out="127.0.2.4", dead_upstream=True) as sq_dead,
    ):
        proxies = [tp_ok, sq_ok, tp_dead, sq_dead]
        s: dict[str, Any] = {
            "SCALE_EGRESSES": [p.url for p in proxies],
            "SCALE_OUTCOME_LOG": str(tmp_path / "outcomes.jsonl"),
            "CONCURRENT_REQUESTS": CONCURRENCY,
            "SCALE_RETRY_POLICY": FAST,
            "SCALE_EGRESS_MIN_FAILURES": MIN_FAILURES,
            "SCALE_EGRESS_QUARANTINE": 600,
        }
        res = start_crawl(None, s, tmp_path, start_urls=web.start_urls).finish(timeout=240)
        expected = web.detail_urls()
        served = web.requests()
    # the servers were stopped: Squid's logs are copied out
    outs = every_page_once(res, expected, tmp_path / "outcomes.jsonl")
    eid = {p: p.url.removeprefix("http://") for p in proxies}
    for dead, attempts in ((tp_dead, _tinyproxy_attempts(tp_dead)), (sq_dead, _squid_attempts(sq_dead))):
        # every attempt through it got the proxy's own answer, classed as the egress's failure
        failed = res.stats.get(f"scale/egress/by/{eid[dead]}/failed/egress_failed", 0)
        assert 1 <= attempts == failed <= EVICTION_BOUND, (dead.name, attempts, failed)
        assert f"egress {eid[dead]} quarantined until" in res.log, res.tail()
        mine = [o for o in outs if o["egress"] == eid[dead]]
        assert all(o["cls"] == "egress_failed" and o["reason"].startswith("proxy answer: ") for o in mine), mine
        assert all(o["blame"] == "egress_site" for o in mine), mine
    # the dead proxies reached no site; the healthy ones did, each from its own address
    clients = Counter(r["client"] for r in served)
    assert set(clients) <= {"127.0.2.1", SQUID_OUT} and clients["127.0.2.1"] > 0 and clients[SQUID_OUT] > 0
    # nginx's deny of the healthy Squid's address: blocked there, the pages came through tinyproxy
    assert {r["status"] for r in served if r["host"] == "127.0.1.4" and r["client"] == SQUID_OUT} <= {403}
    assert "Traceback" not in res.log, res.tail()


def _get(url: str, proxy: str | None = None) -> tuple[int, dict[str, str], bytes]:
    handler = urllib.request.ProxyHandler({"http": proxy} if proxy else {})
    try:
        with urllib.request.build_opener(handler).open(url, timeout=hang_guard(10)) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _verdict(url: str, answer: tuple[int, dict[str, str], bytes], proxy: str | None) -> tuple[str, str]:
    status, headers, body = answer
    req = Request(url, meta={"proxy": proxy} if proxy else {})
    v = Classifier().classify_response(HtmlResponse(url, status=status, headers=headers, body=body, request=req))
    return v.cls.value, v.reason


def test_the_real_servers_answer_as_the_tests_and_the_classifier_expect(tmp_path: Path):
    """What the unit tests take for tinyproxy's, Squid's and nginx's answers is what the
    programs installed here send: nginx's limit_req refusals (429 with Retry-After, its
    503), Crawl-delay, deny, the access log's client addresses; the proxies' own pages;
    the random 503s of a site with ``noise``; the blackhole, which never answers."""
    _, _, c, d = SITES
    # one request a minute: the second is refused whatever the machine's speed
    a = Site("a1", "127.0.1.5", pages=1, rate=1 / 60, burst=0, retry_after=1)
    b = Site("b1", "127.0.1.6", pages=1, rate=1 / 60, burst=0, limit_status=503)
    noisy = Site("n1", "127.0.1.7", pages=1, noise=0.5)
    with (
        RealSites(tmp_path / "nginx", [*SITES, a, b, noisy]) as web,
        Tinyproxy(tmp_path / "tp-ok", out="127.0.2.1") as tp_ok,
        Squid(tmp_path / "sq-ok", out=SQUID_OUT) as sq_ok,
        Tinyproxy(tmp_path / "tp-dead", out="127.0.2.3", dead_upstream=True) as tp_dead,
        Squid(tmp_path / "sq-dead", out="127.0.2.4", dead_upstream=True) as sq_dead,
        Blackhole() as hole,
    ):
        # half of the noisy site's answers are nginx's own 503 (40 tries: both kinds, but for 2^-39)
        noise = [_get(web.url(noisy, "/item/1.html")) for _ in range(40)]
        assert {s for s, _, _ in noise} == {200, 503}
        assert not [h for s, h, _ in noise if s == 503 and "Retry-After" in h]
        with pytest.raises(OSError, match="timed out"):  # the blackhole takes the request, never answers
            urllib.request.build_opener(urllib.request.ProxyHandler({"http": hole.url})).open(
                web.url(c, "/item/1.html"), timeout=1
            )
        assert hole.accepted == 1
        item = web.url(a, "/item/1.html")
        assert _get(item)[0] == 200
        refused = _get(item)
        assert refused[0] == 429 and refused[1]["Retry-After"] == "1"
        assert _get(web.url(b, "/item/1.html"))[0] == 200
        refused_b = _get(web.url(b, "/item/1.html"))
        assert refused_b[0] == 503 and "Retry-After" not in refused_b[1]
        assert "Crawl-delay: 0.5" in _get(web.url(c, "/robots.txt"))[2].decode()
        assert _get(web.url(d, "/item/1.html"), sq_ok.url)[0] == 403  # deny of Squid's address
        assert _get(web.url(d, "/item/1.html"), tp_ok.url)[0] == 200
        site = web.url(c, "/item/1.html")
        assert _verdict(site, _get(site, tp_ok.url), tp_ok.url) == ("ok", "")
        assert _verdict(site, _get(site, sq_ok.url), sq_ok.url) == ("ok", "")
        assert _verdict(site, _get(site, tp_dead.url), tp_dead.url) == ("egress_failed", "proxy answer: tinyproxy 502")
        assert _verdict(site, _get(site, sq_dead.url), sq_dead.url)[0] == "egress_failed"
        nowhere = "http://127.0.1.9:9/x"  # no site there: the healthy proxies answer for themselves
        assert _verdict(nowhere, _get(nowhere, tp_ok.url), tp_ok.url) == (
            "egress_failed",
            "proxy answer: tinyproxy 500",
        )
        assert _verdict(nowhere, _get(nowhere, sq_ok.url), sq_ok.url) == (
            "egress_failed",
            "proxy answer: squid ERR_CONNECT_FAIL",
        )
        served = web.requests()
    assert {r["client"] for r in served} == {"127.0.0.1", "127.0.2.1", SQUID_OUT}  # each proxy its own address
    assert all(r["t"] > 1e9 and r["path"] for r in served)
