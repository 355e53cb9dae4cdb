"""The outcome bus in a real, faulty crawl: a plain function subscribed to
``scrapy_scale.signals.outcome`` receives every attempt and exactly one final outcome
per request, with the fields filled in; the stats are what a subscriber counted."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from scrapy.utils.response import response_status_message

from scrapy_scale.outcomes.model import CLASSES, FailureClass
from scrapy_scale.testbed import Testbed
from tests.crawl.test_retry_crawl import FAST, path_of
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl

PLAN = (
    "500@1:/item/3;"  # always 500: transient, 1 + 2 retries, given up
    "503@1:/item/4,first=2;"  # transient twice, ok on the 3rd attempt
    "404@1:/item/7;"  # not_found
    "layout@1:/item/5,variant=missing;"  # parse_failed (critical field missing)
    "block@2:/item/6;"  # a challenge page found by a css rule: blocked, given up
    "429@2:/item/2,first=1,retry_after=1;"  # rate_limited once (Retry-After: 1), then ok
    "410@2:/item/10"  # not_found
)


def test_a_plain_subscriber_sees_every_attempt_and_one_final_per_request(tmp_path: Path) -> None:
    received = tmp_path / "received.jsonl"
    settings = {
        "EXTENSIONS": {"tests.support.outcome_subscriber.Connect": 0},
        "TEST_OUTCOMES_FILE": str(received),
        "SCALE_CRITICAL_FIELDS": ["price"],
        "SCALE_FAILURE_RULES": [{"css": "#challenge-form", "class": "blocked", "reason": "challenge"}],
        "SCALE_RETRY_POLICY": FAST,
        "LOG_LEVEL": "DEBUG",  # Scrapy's "Retrying ..." line is a DEBUG line
    }
    with Testbed(hosts=2, pages=20, seed=5, faults=PLAN, robots_disallow=["/item/9"]) as tb:
        res = run_crawl(tb, settings, tmp_path, timeout=120)
        served = Counter((r.host, r.path) for r in tb.log)
    assert res.returncode == 0, res.tail()
    got = [json.loads(line) for line in received.read_text().splitlines()]
    internal = [o for o in got if o["internal"]]
    crawl = [o for o in got if not o["internal"]]

    # Scrapy's own downloads (robots.txt) are on the bus too, marked internal
    assert {path_of(o["url"])[1] for o in internal} == {"/robots.txt"}
    assert all(o["final"] and o["cls"] == "ok" for o in internal)

    chains: dict[str, list[dict]] = defaultdict(list)
    for o in crawl:
        chains[o["fingerprint"]].append(o)
    finals = {}
    for fp, chain in chains.items():
        assert re.fullmatch(r"[0-9a-f]{40}", fp)
        # every attempt, in order; all but the last non-final; exactly one final
        assert [o["attempt"] for o in chain] == list(range(1, len(chain) + 1)), chain
        assert [o["final"] for o in chain] == [False] * (len(chain) - 1) + [True], chain
        finals[path_of(chain[-1]["url"])] = chain[-1]
        for o in chain:
            host, path = path_of(o["url"])
            assert o["domain"] == host and o["request_url"] == o["url"]
            assert o["blame"] == CLASSES[FailureClass(o["cls"])].blame.value
            if o["reason"] != "ignored":  # downloaded: slot, status and latency known
                assert o["slot"] == host and o["status"] is not None and o["latency"] is not None
            if not o["final"]:
                assert o["retry_at"] and o["cls"] != "ok"
            else:
                assert o["retry_at"] is None
        # the target saw one request per attempt (robots.txt-disallowed: none)
        last = chain[-1]
        assert served[path_of(last["url"])] == (0 if last["reason"] == "ignored" else len(chain)), last

    # one chain per page the crawl asked for
    pages = {(h, p) for (h, p) in served if p != "/robots.txt"} | {(h, "/item/9") for h in tb.hosts}
    assert set(finals) == pages
    h1, h2 = tb.hosts[0], tb.hosts[1]
    summary = {
        k: (o["cls"], o["attempt"], o["gave_up"]) for k, o in finals.items() if o["cls"] != "ok" or o["attempt"] > 1
    }
    assert summary == {
        (h1, "/item/3"): ("transient", 3, True),
        (h1, "/item/4"): ("ok", 3, False),
        (h1, "/item/7"): ("not_found", 1, False),
        (h1, "/item/5"): ("parse_failed", 1, False),
        (h1, "/item/9"): ("fatal", 1, False),
        (h2, "/item/9"): ("fatal", 1, False),
        (h2, "/item/6"): ("blocked", 3, True),
        (h2, "/item/2"): ("ok", 2, False),
        (h2, "/item/10"): ("not_found", 1, False),
    }
    assert finals[(h1, "/item/5")]["items"] == 1 and finals[(h1, "/item/1")]["items"] == 1
    (ra,) = [o for o in crawl if o["cls"] == "rate_limited"]
    assert ra["retry_after_raw"] == "1" and ra["blame"] == "domain" and ra["status"] == 429
    assert {o["blame"] for o in crawl if o["cls"] == "blocked"} == {"egress_domain"}

    # the stats are exactly what this subscriber counted (the stats are a subscriber too)
    st = res.stats
    final_list = [o for o in crawl if o["final"]]
    by = Counter(o["cls"] for o in final_list)
    assert {k[len("scale/outcome/") :]: v for k, v in st.items() if k.startswith("scale/outcome/")} == dict(by)
    retries = Counter(o["cls"] for o in crawl if not o["final"])
    assert {
        k[len("scale/retry/") :]: v
        for k, v in st.items()
        if k.startswith("scale/retry/") and k[len("scale/retry/") :] in by | retries
    } == dict(retries)
    gave_up = Counter(o["cls"] for o in final_list if o["gave_up"])
    assert {k[len("scale/gave_up/") :]: v for k, v in st.items() if k.startswith("scale/gave_up/")} == dict(gave_up)
    depth = Counter(str(o["attempt"]) for o in final_list)
    assert {k[len("scale/retry_depth/") :]: v for k, v in st.items() if k.startswith("scale/retry_depth/")} == dict(
        depth
    )
    assert st["scale/internal/ok"] == len(internal)
    # Scrapy's own RetryMiddleware keys, for existing dashboards and monitors
    assert st["retry/count"] == sum(retries.values())
    assert st["retry/max_reached"] == sum(gave_up.values())
    assert st["retry/reason_count/500 Internal Server Error"] == 2
    assert st[f"retry/reason_count/{response_status_message(429)}"] == 1  # named as Scrapy names it
    assert st["retry/reason_count/challenge"] == 2  # a block page (200): the rule's reason
    # and Scrapy's "Retrying ..." debug line is kept
    assert len(re.findall(r"DEBUG: Retrying <GET \S+> \(failed \d times\)", res.log)) == sum(retries.values())


def test_sync_and_async_callbacks_get_the_same_final_outcomes(tmp_path: Path) -> None:
    """The outcome spider middleware has a sync and an async form (a sync callback's output
    stays a sync chain): both count the items and run the parse checks alike."""
    plan = "layout@1:/item/3,variant=missing;404@1:/item/5"
    finals = {}
    for spider in ("catalog", "catalog_async"):
        received = tmp_path / f"{spider}.jsonl"
        settings = {
            "EXTENSIONS": {"tests.support.outcome_subscriber.Connect": 0},
            "TEST_OUTCOMES_FILE": str(received),
            "SPIDER_MODULES": ["example_project.spiders", "tests.support.variant_spiders"],
            "SCALE_CRITICAL_FIELDS": ["price"],
            "ROBOTSTXT_OBEY": False,
        }
        with Testbed(hosts=1, pages=8, seed=3, faults=plan) as tb:
            res = run_crawl(tb, settings, tmp_path / spider, spider=spider, timeout=90)
        assert res.returncode == 0, res.tail()
        got = [json.loads(line) for line in received.read_text().splitlines()]
        finals[spider] = {path_of(o["url"])[1]: (o["cls"], o["items"]) for o in got if o["final"]}
    sync, async_ = finals["catalog"], finals["catalog_async"]
    assert sync == async_
    assert sync["/item/3"] == ("parse_failed", 1)  # the item lacks its critical field
    assert sync["/item/5"] == ("not_found", 0)
    assert sync["/item/1"] == ("ok", 1)
    assert sum(1 for cls, _ in sync.values() if cls == "ok") >= 7  # listing pages and the other items
