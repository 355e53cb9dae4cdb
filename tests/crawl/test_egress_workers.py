"""Two workers on one Redis: an egress one of them evicts is avoided by the other."""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawl.test_egress_crawl import CONCURRENCY, FAST
from tests.support.crawling import start_crawl

pytestmark = pytest.mark.crawl


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_an_egress_evicted_by_one_worker_is_avoided_by_the_other(tmp_path, redis_url, redis_prefix):
    specs = [ProxySpec("a"), ProxySpec("b"), ProxySpec("dead", mode="dead")]
    with Testbed(hosts=3, pages=300, seed=8, proxies=specs) as tb:
        dead = f"127.0.0.1:{tb.proxy_ports['dead']}"
        base = {
            "SCALE_JOB": redis_prefix,
            "SCALE_FRONTIER_URL": redis_url,
            "SCALE_EGRESSES": tb.proxy_urls,
            "CONCURRENT_REQUESTS": CONCURRENCY,
            "SCALE_RETRY_POLICY": FAST,
            "SCALE_EGRESS_QUARANTINE": 600,
            "SCALE_EGRESS_SYNC": 0.5,
            "DOWNLOAD_DELAY": 0.02,
            "SCALE_FRONTIER_BATCH": 16,
        }
        # w0 evicts after 3 failures; w1 would need 1000 of its own, so whatever it avoids,
        # it avoids because of what w0 shared
        logs = [tmp_path / f"w{i}" / "outcomes.jsonl" for i in range(2)]
        procs = [
            start_crawl(
                tb,
                {
                    **base,
                    "SCALE_FRONTIER_WORKER": f"w{i}",
                    "SCALE_OUTCOME_LOG": str(logs[i]),
                    "SCALE_EGRESS_MIN_FAILURES": 3 if i == 0 else 1000,
                },
                tmp_path / f"w{i}",
            )
            for i in range(2)
        ]
        results = [p.finish(240) for p in procs]
        expected = tb.detail_urls()
    for r in results:
        assert r.returncode == 0, r.tail()
    assert len({i["url"] for r in results for i in r.items} & expected) >= 0.99 * len(expected)
    w0, w1 = results
    assert f"egress {dead} quarantined until" in w0.log
    m = re.search(rf"^(\S+ \S+) .*egress {re.escape(dead)} quarantined by another worker", w1.log, re.M)
    assert m, w1.log[-3000:]
    assert f"egress {dead} quarantined until" not in w1.log  # not on its own evidence
    outs = [json.loads(line) for line in logs[1].read_text().splitlines()]
    via_dead = [o for o in outs if o["egress"] == dead]
    # after w1 adopted the quarantine (log time, second resolution), only attempts already in
    # flight through the dead egress could still end there
    adopted = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + 1
    assert len([o for o in via_dead if o["time"] > adopted]) <= CONCURRENCY
    assert Counter(o["cls"] for o in via_dead) <= Counter({"egress_failed": len(via_dead)})
    assert w1.stats.get("item_scraped_count", 0) > 0, (len(outs), len(via_dead))  # w1 did crawl
