"""The middlewares' contract in a real crawl: meta keys, hooks, not-before, errbacks."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawl.test_retry_crawl import EXPLICIT, FAST, crawl, finals_by_path
from tests.support.crawling import run_crawl
from tests.support.outcomes_spiders import NOT_BEFORE_DELAY

pytestmark = pytest.mark.crawl

H1 = "shop1.example.test"


@pytest.mark.parametrize("scheduler", ["scrapy", "eager"])
def test_probe_spider_hooks_and_not_before(tmp_path, scheduler):
    settings = {
        "SPIDER_MODULES": ["tests.support.outcomes_spiders"],
        "SCALE_RETRY_POLICY": FAST,
        "DOWNLOADER_MIDDLEWARES": dict(EXPLICIT["DOWNLOADER_MIDDLEWARES"]),
    }
    if scheduler == "eager":
        settings["SCHEDULER"] = "tests.support.outcomes_spiders.EagerScheduler"
    with Testbed(
        hosts=1, pages=12, seed=1, faults="500@1:/item/2;500@1:/item/3;reset@1:/item/5;503@1:/item/11,first=1"
    ) as tb:
        res, outcomes = crawl(tb, tmp_path, settings, spider="outcomes_probe")
        served = Counter(r.path for r in tb.log)
        times = {r.path: r.time for r in tb.log}
    assert served["/item/2"] == 1  # dont_retry
    assert served["/item/3"] == 5  # max_retry_times = 4
    nb = float(re.search(r"probe not_before=([\d.]+)", res.log).group(1))
    assert times["/item/4"] >= nb  # never sent before its not-before time
    finals = finals_by_path(outcomes)
    f = {p: (o["cls"], o["reason"], o["items"], o["attempt"]) for (h, p), o in finals.items()}
    assert f["/item/1"] == ("parse_failed", "callback raised ValueError", 0, 1)
    assert f["/item/2"][:2] == ("transient", "HTTP 500") and f["/item/2"][3] == 1
    assert f["/item/3"][0] == "transient" and f["/item/3"][3] == 5
    assert f["/item/4"] == ("ok", "", 1, 1)
    assert f["/item/5"][0] == "transient" and f["/item/5"][3] == 3
    assert f["/item/6"] == ("parse_failed", "callback raised KeyError", 1, 1)
    assert f["/item/7"] == ("parse_failed", "no items", 0, 1)  # @expects_items
    assert f["/item/8"] == ("ok", "", 0, 1)  # meta scale_expect_items=False wins
    # a retry made by the callback (get_retry_request) continues the chain: non-final, then final
    assert served["/item/9"] == 2 and f["/item/9"] == ("ok", "", 1, 2)
    nf9 = [o for o in outcomes if o["url"].endswith("/item/9") and not o["final"]]
    assert [(o["cls"], o["reason"], o["attempt"]) for o in nf9] == [("parse_failed", "retried by the callback", 1)]
    # a request that copied response.meta (chain keys too) starts its own chain
    assert f["/item/11"][0] == "ok" and f["/item/11"][3] == 2
    assert f["/item/10"] == ("ok", "", 1, 1)
    assert finals[(H1, "/item/10")]["fingerprint"] != finals[(H1, "/item/11")]["fingerprint"]
    # the errback sees the real download exception, not a wrapper
    eb = [i for i in res.items if "errback" in i]
    assert len(eb) == 1 and eb[0]["errback"] in ("DownloadFailedError", "ResponseFailed", "ResponseNeverReceived")
    assert res.stats["scale/gave_up/transient"] == 3  # /item/2 (dont_retry), /item/3, /item/5
    if scheduler == "eager":
        assert res.stats["scale/retry/not_before_guard"] >= 1
    # retries carry the contract's meta keys: attempt, not-before, last failure (checked via outcomes)
    nonfinal = [o for o in outcomes if not o["final"] and o["url"].endswith("/item/3")]
    assert [o["attempt"] for o in nonfinal] == [1, 2, 3, 4]
    assert all(o["retry_at"] >= o["time"] - 0.01 for o in nonfinal)
    assert times["/item/4"] - min(times.values()) >= NOT_BEFORE_DELAY - 0.5


@pytest.mark.parametrize("mode", ["auth", "dead"])
def test_egress_failures_name_the_egress_to_avoid_without_its_secret(tmp_path, mode):
    with Testbed(hosts=1, pages=3, seed=1, proxies=[ProxySpec("p1", mode=mode, password="s3cr3t")]) as tb:
        port = tb.proxy_ports["p1"]
        # wrong credentials for "auth": the proxy answers 407; "dead": the connection is refused
        proxy = f"http://user:wr0ngpass@127.0.0.1:{port}"
        s = dict(EXPLICIT)
        s.update({"SCALE_RETRY_POLICY": {"egress_failed": {"retries": 1}}, "ROBOTSTXT_OBEY": False})
        s["SCALE_OUTCOME_LOG"] = str(tmp_path / "outcomes.jsonl")
        res = run_crawl(tb, s, tmp_path, env={"http_proxy": proxy, "no_proxy": ""})
        assert res.returncode == 0, res.tail()
        text = (tmp_path / "outcomes.jsonl").read_text()
        outcomes = [json.loads(line) for line in text.splitlines()]
        proxied = len([e for e in tb.proxy_log if e.target.endswith("/")]) if mode == "auth" else None
    root = [o for o in outcomes if o["url"].endswith("/")]
    assert [(o["cls"], o["final"], o["attempt"]) for o in root] == [
        ("egress_failed", False, 1),
        ("egress_failed", True, 2),
    ]
    egress = f"127.0.0.1:{port}"
    assert root[0]["egress"] == egress and root[0]["avoid_egress"] == [egress]
    assert root[0]["reason"] == ("HTTP 407" if mode == "auth" else "proxy unreachable")
    if proxied is not None:
        assert proxied == 2  # the budget: one retry
    assert res.stats["scale/gave_up/egress_failed"] == 1
    for where in (text, res.log, json.dumps(res.stats)):
        assert "wr0ngpass" not in where and "s3cr3t" not in where
