"""A Redis without persistence restarted mid-crawl has lost the job's frontier: the worker
must stop with a clear error (exit 1), not log `drained; run finished` and exit 0.
Real processes: a private redis-server (no AOF, no RDB) killed with SIGKILL and started
again on the same port, at a moment chosen from the crawl's progress."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scrapy_scale.frontier import open_store
from scrapy_scale.testbed import Testbed
from tests.support import services
from tests.support.crawling import start_crawl
from tests.support.hang import hang_guard

pytestmark = [pytest.mark.crawl, pytest.mark.paced]


@pytest.mark.timeout(300)
def test_a_redis_that_lost_the_job_stops_the_crawl_with_an_error(tmp_path: Path) -> None:
    srv = services.private_redis(tmp_path / "redis", appendonly=False)
    url = f"redis://127.0.0.1:{srv.port}/0"
    settings = {"SCALE_FRONTIER_URL": url, "LOG_LEVEL": "INFO", "CONCURRENT_REQUESTS": 8, "FEEDS": None}
    try:
        with Testbed(hosts=2, pages=100, seed=6, faults="slow:/item/*,delay=0.1") as tb:
            proc = start_crawl(tb, settings, tmp_path)
            store = open_store(url, "catalog")
            try:
                deadline = time.monotonic() + hang_guard(90)
                done = 0
                while done < 20 and time.monotonic() < deadline and proc.poll() is None:
                    try:
                        done = store.counts()["done"]
                    except Exception:  # noqa: BLE001 - not created yet
                        pass
                    time.sleep(0.05)
            finally:
                store.close()
            assert done >= 20, proc.finish(5).tail() if proc.poll() is not None else f"done={done}"
            srv.restart()  # SIGKILL, then the same server again: empty, as it keeps nothing
            res = proc.finish(180)
    finally:
        srv.kill()
    assert res.returncode == 1, res.tail()
    log = res.log
    # at startup: the server keeps nothing across a restart
    assert "has no persistence (appendonly no, no RDB snapshots)" in log, log[:3000]
    assert "no longer has job 'catalog'" in log and "the run marker" in log, res.tail()
    assert "drained; run finished" not in log, res.tail()
    assert "stopped early (frontier_failed)" in log and "exit status   1:" in log, res.tail()
