"""The frontier scheduler in real `scrapy crawl catalog` runs against the testbed.

Each test checks the crawl's output (items) against the testbed's truth and the
frontier's own counts against what the testbed served: done == pages fetched.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.store import FrontierStore
from scrapy_scale.testbed import Fault, Testbed
from tests.support.crawling import run_crawl, start_crawl
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl


def pages_served(tb: Testbed) -> set[tuple[str, str]]:
    """(host, path) of every page the crawl fetched (robots.txt is not the frontier's)."""
    return {(s.host, s.path) for s in tb.log if s.path != "/robots.txt"}


def frontier(tmp_path: Path, settings: dict[str, Any], job: str = "catalog") -> FrontierStore:
    url = settings.get("SCALE_FRONTIER_URL") or f"sqlite:///{tmp_path / 'state' / 'frontier.db'}"
    return open_store(url, settings.get("SCALE_JOB", job))


@pytest.fixture(params=["sqlite", "redis"])
def backend_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "redis":
        return {
            "SCALE_FRONTIER_URL": request.getfixturevalue("redis_url"),
            "SCALE_JOB": request.getfixturevalue("redis_prefix"),
        }
    return {}


def test_crawl_drains_reconciles_and_a_second_crawl_starts_a_new_run(
    tmp_path: Path, backend_settings: dict[str, Any]
) -> None:
    with Testbed(hosts=2, pages=40, seed=3) as tb:
        res = run_crawl(tb, backend_settings, tmp_path)
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()
        assert len(res.items) == len(tb.detail_urls())  # each page crawled once
        served = pages_served(tb)
        with frontier(tmp_path, backend_settings) as store:
            st = store.status()
            assert st.counts["done"] == len(served) == res.stats["scale/frontier/acked"]
            assert st.drained and st.counts["failed"] == 0
            assert st.run is not None and st.run.ended_at is not None  # the run finished
            assert st.leases_by_worker == {}
        assert res.stats["scale/frontier/state/done"] == len(served)

        tb.clear_log()
        again = run_crawl(tb, backend_settings, tmp_path)
        assert again.returncode == 0, again.tail()
        assert "(new) worker" in again.log and "run 2" in again.log
        assert again.item_urls == tb.detail_urls()  # a finished job is crawled again, from its seeds
        with frontier(tmp_path, backend_settings) as store:
            assert [r.run_id for r in store.runs()] == [1, 2]
            assert store.counts()["done"] == len(pages_served(tb))


@pytest.mark.paced  # its resume has an upper time bound
def test_killed_crawl_resumes_without_refetching_done_pages(tmp_path: Path) -> None:
    # slow detail pages, so the kill lands mid-crawl; one hangs, so the crawl cannot drain first
    with Testbed(
        hosts=2,
        pages=60,
        seed=5,
        faults=[Fault("hang", path="/item/1", hosts=(1,)), Fault("slow", path="/item/*", delay=0.05)],
    ) as tb:
        settings = {"CONCURRENT_REQUESTS": 4}
        proc = start_crawl(tb, settings, tmp_path)
        deadline = time.monotonic() + hang_guard(60)
        while time.monotonic() < deadline and tb.count(kind="slow") < 30:
            time.sleep(0.05)
        proc.kill()  # SIGKILL: no goodbye
        proc.wait(hang_guard(10))
        with frontier(tmp_path, settings) as store:
            before = store.status()
        assert before.counts["done"] > 0 and not before.drained, before
        fetched_before = len(tb.log)

        tb.set_faults([Fault("slow", path="/item/*", delay=0.05)])
        res = run_crawl(tb, settings, tmp_path)
        assert res.returncode == 0, res.tail()
        assert "(resumed) worker" in res.log
        # the restarted worker took its own leases back at once (not after the 60 s lease)
        took = re.search(r"took back (\d+) lease", res.log)
        assert took and int(took.group(1)) > 0, res.tail()
        assert res.duration < 40, res.duration
        items = {json.dumps(i, sort_keys=True) for i in res.items}
        got = {i["url"] for i in res.items}
        # the second crawl fetches what the first did not finish, not the done pages again
        refetched = len(tb.log) - fetched_before
        assert refetched <= len(pages_served(tb)) - before.counts["done"] + 8, refetched
        # the feed holds each item once, but for those the killed run had stored (and so
        # re-sent to this run's feed) whose page was not acked before the kill, so crawled again
        resent = re.search(r"feeds: re-sent (\d+) item", res.log)
        assert resent, res.tail()
        assert got <= tb.detail_urls() and 0 <= len(res.items) - len(items) <= int(resent.group(1))
        with frontier(tmp_path, settings) as store:
            st = store.status()
            assert st.drained and st.counts["done"] == len(pages_served(tb))


def test_seeds_from_the_redis_feed_key(tmp_path: Path, redis_url: str, redis_prefix: str) -> None:
    import redis

    settings = {"SCALE_FRONTIER_URL": redis_url, "SCALE_JOB": redis_prefix}
    with Testbed(hosts=2, pages=10, seed=7) as tb:
        with open_store(redis_url, redis_prefix, connect=False) as store:
            key = store.feed_key
        assert key is not None
        host2 = tb.start_urls[1]
        redis.Redis.from_url(redis_url).rpush(
            key, json.dumps({"url": host2, "callback": "parse"}), "not json", json.dumps("http://x/%")
        )
        res = run_crawl(tb, settings, tmp_path, start_urls=tb.start_urls[:1])
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()  # host 2 came in through the feed
        assert res.stats.get("scale/frontier/feed_refused", 0) >= 1


def test_bad_frontier_url_fails_at_startup_with_what_to_do(tmp_path: Path) -> None:
    from tests.support.services import free_port

    res = run_crawl(
        None,
        {"SCALE_FRONTIER_URL": f"redis://127.0.0.1:{free_port()}/0"},
        tmp_path,
        start_urls=["http://shop1.example.test/"],
        timeout=60,
    )
    assert res.returncode != 0
    assert "cannot reach Redis" in res.log and "SCALE_FRONTIER_URL" in res.log
    res = run_crawl(
        None,
        {"SCALE_FRONTIER_URL": "mongodb://127.0.0.1/x"},
        tmp_path,
        start_urls=["http://shop1.example.test/"],
        timeout=60,
    )
    assert res.returncode != 0
    assert "SCALE_FRONTIER_URL" in res.log and "unknown URL scheme" in res.log


def test_plain_scrapy_without_the_addon(tmp_path: Path) -> None:
    """The scheduler alone (no outcome middlewares): Scrapy's RetryMiddleware retries
    update their record, and requests are acked once the engine is done with them."""
    settings = {"ADDONS": {}, "SCHEDULER": "scrapy_scale.frontier.Scheduler"}
    with Testbed(hosts=2, pages=40, seed=3, faults="500:/item/1*,first=1; 404:/item/7") as tb:
        res = run_crawl(tb, settings, tmp_path)
        assert res.returncode == 0, res.tail()
        assert res.item_urls == {u for u in tb.detail_urls() if not u.endswith("/item/7")}
        assert res.stats["retry/count"] == res.stats["scale/frontier/updated"] > 0
        with frontier(tmp_path, settings) as store:
            st = store.status()
        assert st.drained and st.run is not None and st.run.ended_at is not None
        assert st.counts["done"] == len(pages_served(tb))


@pytest.mark.paced  # seeds must come within the worker's CLOSESPIDER_TIMEOUT
def test_wait_for_seeds_keeps_the_worker_open_for_outside_seeds(tmp_path: Path) -> None:
    settings = {"SCALE_FRONTIER_WAIT_FOR_SEEDS": True, "CLOSESPIDER_TIMEOUT": 8}
    with Testbed(hosts=2, pages=10, seed=9) as tb:
        proc = start_crawl(tb, settings, tmp_path, start_urls=tb.start_urls[:1])
        host1 = {u for u in tb.detail_urls() if tb.hosts[0] in u}
        deadline = time.monotonic() + hang_guard(30)
        while time.monotonic() < deadline:
            with frontier(tmp_path, settings) as store:
                if store.counts()["done"] >= len(host1) + 1 and store.drained():
                    break
            time.sleep(0.2)
        time.sleep(1)
        assert proc.poll() is None, "the worker closed although it should wait for seeds"
        with frontier(tmp_path, settings) as store:
            store.seed([tb.start_urls[1]])  # what `scrapy scale seed JOB URL` does
        res = proc.finish(60)
        assert res.returncode == 0, res.tail()
        assert res.item_urls == tb.detail_urls()  # the second host came in while it waited
        assert "closespider_timeout" in res.log


def test_a_sites_requests_are_handed_out_no_faster_than_its_slot_takes_them(tmp_path: Path) -> None:
    """The frontier holds a host's requests while its download slot is full, so none
    queue in the slot (the downloader starts a queued one before the finished transfer's
    connection is back in the pool: a new connection for it, another closed). The
    robots.txt middleware awaits between the hand-out and the slot; counting only the
    slot, the bench crawl opened 187 connections for 4 hosts x 8 per domain, plain Scrapy
    124. Counting the requests on their way too (frontier/scheduling/slot_transit.py), connections stay
    near the slots' concurrency. Throttle off: only the slot check paces the hand-out."""
    per_domain = 4
    settings = {
        "SCALE_THROTTLE_ENABLED": False,
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": per_domain,
        "ROBOTSTXT_OBEY": True,
    }
    with Testbed(hosts=2, pages=600, seed=4) as tb:
        res = run_crawl(tb, settings, tmp_path)
        connections = tb.connections
        served = len(tb.log)
        tb_details = tb.detail_urls()
    print(f"{connections} connections for {served} requests")
    assert res.returncode == 0, res.tail()
    assert res.item_urls == set(tb_details)
    # each host: its slot's connections, plus robots.txt's; a few more when a response
    # comes in before its connection is back (the host's last requests, the start)
    assert connections <= 2 * (per_domain + 1) + 6, (connections, served)


def test_requests_a_middleware_answers_do_not_hold_their_sites_slot(tmp_path: Path) -> None:
    """A request answered in a downloader middleware (an HTTP cache hit) never reaches its
    download slot: it stops counting as on its way at once (frontier/scheduling/slot_transit.py), not
    after a grace during which the site's next requests waited. The second crawl of the
    same pages comes from Scrapy's HTTP cache alone: with the grace, 2 requests per
    second and per 5 s heartbeat got out."""
    settings = {
        "SCALE_THROTTLE_ENABLED": False,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
        "HTTPCACHE_ENABLED": True,
        "HTTPCACHE_DIR": str(tmp_path / "httpcache"),
        "ROBOTSTXT_OBEY": False,
    }
    with Testbed(hosts=1, pages=150, seed=6) as tb:
        first = run_crawl(tb, settings, tmp_path / "first")
        assert first.returncode == 0, first.tail()
        served = len(tb.log)
        again = run_crawl(tb, settings, tmp_path / "again")
        assert again.returncode == 0, again.tail()
        assert len(tb.log) == served  # every page of the second crawl came from the cache
    assert again.item_urls == first.item_urls == set(tb.detail_urls())
    assert again.stats["httpcache/hit"] >= 150
    elapsed = again.stats["elapsed_time_seconds"]
    print(f"from the cache: {elapsed:.1f} s")
    assert elapsed < 30, elapsed  # 158 pages; held a second per 2, it took over 75 s
