"""A Redis outage under the egress pool's shared state: "egress: cannot sync" once, then
one line when it syncs again (issue 35: 92 lines, one a second per worker)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.testbed import ProxySpec, Testbed
from tests.crawl.test_egress_crawl import _wait_for
from tests.support.crawling import start_crawl

pytestmark = [pytest.mark.crawl, pytest.mark.serial]


@pytest.mark.timeout(240)
def test_a_redis_outage_logs_cannot_sync_once_then_once_on_recovery(tmp_path: Path, redis_server: Any) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    # one page answers only after 20 s: the crawl is still running when Redis is back
    with Testbed(
        hosts=2, pages=40, seed=9, proxies=[ProxySpec("p1"), ProxySpec("p2")], faults="slow@1:/item/40,delay=20"
    ) as tb:
        s = {
            "SCALE_EGRESSES": tb.proxy_urls,
            "SCALE_FRONTIER_URL": url,
            "SCALE_JOB": "outage",
            "SCALE_EGRESS_SYNC": 0.2,
            "DOWNLOAD_TIMEOUT": 60,
            "LOG_LEVEL": "INFO",
        }
        proc = start_crawl(tb, s, tmp_path)
        log = proc.run_dir / "crawl.log"
        try:
            # pages crawled: the outage comes mid-crawl ("Crawled 0 pages", LogStats' first line,
            # comes as the spider opens; Redis killed then left the crawl silent for 90 s, twice
            # in 10: the reactor waited for Redis, fixed and tested in
            # test_frontier_reactor_never_waits.py)
            _wait_for(log, r"Crawled [1-9]\d* pages|progress: [1-9]\d* done", proc)
            redis_server.kill()
            _wait_for(log, r"egress: cannot sync", proc)
            time.sleep(2.0)  # ten sync periods of 0.2 s, each failing
            redis_server.start()
            _wait_for(log, r"egress: the pool's state syncs with .* again", proc)
            res = proc.finish(180)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert res.returncode == 0, res.tail()
    assert res.item_urls == tb.detail_urls()
    assert len(re.findall(r"egress: cannot sync", res.log)) == 1, res.log[-5000:]
    m = re.findall(r"egress: the pool's state syncs with .* again after (\d+) failed syncs", res.log)
    assert len(m) == 1 and int(m[0]) >= 5, m  # before: one WARNING line per failed sync


def test_the_pools_redis_state_opens_while_redis_is_down_and_syncs_once_it_is_back(redis_server: Any) -> None:
    """The opener asks the node whether it is a Cluster: done when the spider opened, a Redis
    down at that moment raised in spider_opened and the sync loop never started, so the
    outage was never logged nor the state shared (CI saw no "cannot sync" in 90 s with Redis
    killed as the crawl started). The client is opened at its first use, by each sync."""
    import redis

    from scrapy_scale.egress.shared import RedisState

    redis_server.kill()
    state = RedisState(f"redis://127.0.0.1:{redis_server.port}/0", "outage-open")  # no error: nothing asked yet
    with pytest.raises(redis.ConnectionError):  # the path that failed: the first use opens the client
        state.sync("w1", {}, {"n": 1}, time.time())
    redis_server.start()
    health, live = state.sync("w1", {}, {"n": 1}, time.time())
    assert health == {} and "w1" in live
