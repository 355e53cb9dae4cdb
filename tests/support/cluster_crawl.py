"""The crawl side of the Redis Cluster tests (tests/crawl/test_redis_cluster*.py): where a
key lives, three workers of one job, and waiting for a part of the crawl to be done."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from scrapy_scale.frontier.store import FrontierStore
from scrapy_scale.testbed import Testbed
from tests.support.crawling import CrawlProcess, start_crawl
from tests.support.hang import hang_guard
from tests.support.services import LOOPBACK, RedisCluster


def slot_owner(cluster: RedisCluster, key: str) -> int:
    """The port of the primary that serves ``key``'s slot (asked of the first node)."""
    node = redis.Redis(host=LOOPBACK, port=cluster.nodes[0].port, decode_responses=True)
    try:
        slot = int(node.cluster("keyslot", key))
        for start, end, primary, *_ in node.cluster("slots"):
            if int(start) <= slot <= int(end):
                return int(primary[1])
    finally:
        node.close()
    raise AssertionError(f"no node serves the slot of {key}")


def job_keys_by_node(cluster: RedisCluster, job: str) -> dict[int, set[str]]:
    """The keys of ``job`` (every partition) on each primary."""
    out: dict[int, set[str]] = {}
    for port in cluster.primaries():
        keys = set(cluster.node_keys(port, f"scale:{{{job}}}:*")) | set(cluster.node_keys(port, f"scale:{{{job}/p*"))
        if keys:
            out[port] = keys
    return out


def start_workers(
    tb: Testbed,
    cluster: RedisCluster,
    job: str,
    store_url: str,
    tmp_path: Path,
    rate: float = 20.0,
    settings: dict[str, Any] | None = None,
) -> list[CrawlProcess]:
    """Three workers w0..w2 of ``job`` on the Cluster (the URL of its first node), through
    the testbed's egresses, every site paced by a ``max_rate`` profile (``rate`` a second),
    with ``settings`` added."""
    base = {
        "SCALE_JOB": job,
        "SCALE_FRONTIER_URL": cluster.url,
        "SCALE_STORE_URL": store_url,
        "SCALE_EGRESSES": tb.proxy_urls,
        "SCALE_EGRESS_SYNC": 0.5,
        "SCALE_FRONTIER_BATCH": 8,
        "CONCURRENT_REQUESTS": 8,
        "LOG_LEVEL": "INFO",
        "SCALE_DOMAIN_PROFILES": {"default": {"max_rate": rate, "start_delay": 0.0}},
        **(settings or {}),
    }
    return [start_crawl(tb, {**base, "SCALE_FRONTIER_WORKER": f"w{i}"}, tmp_path / f"w{i}") for i in range(3)]


def wait_until_done(store: FrontierStore, procs: Sequence[CrawlProcess], done: int) -> None:
    """Wait until ``done`` records are done (progress, not the clock, picks the moment of
    a failover or a reshard); fails if a worker exits first or nothing moves for 120 s."""
    deadline = time.monotonic() + hang_guard(120)
    while store.counts()["done"] < done:
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, dead[0].result().tail()
        assert time.monotonic() < deadline, f"fewer than {done} records done"
        time.sleep(0.05)


def kill_left(procs: Sequence[CrawlProcess]) -> None:
    """Kill the workers a failed assertion left running."""
    for p in procs:
        if p.poll() is None:
            p.kill()
