"""A job's frontier while the Cluster moves its slots (a reshard): on a private Redis
Cluster (tests/support/services.py), a slot of one of the job's partitions is moved key by
key (CLUSTER SETSLOT / MIGRATE, as `redis-cli --cluster reshard` does) while the store
works, and a whole crawl goes on while `redis-cli --cluster reshard` moves every slot of
the primary that holds the job's run.

While a slot moves, a script sent for it is redirected (ASK) to the new node, which may
not have its keys yet: every script starts with a guard that a moving slot refuses before
any write (scrapy_scale/frontier/backends/redis/lua/guard.lua), and the store retries it
until the move is done; redis-py's Cluster client follows the ASK and, after, the MOVED."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot
from scrapy import Request

from scrapy_scale.frontier import codec
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.backends.redis import RedisStore
from scrapy_scale.frontier.backends.redis import partitions as P
from scrapy_scale.testbed import ProxySpec, Testbed
from tests.support.cluster_crawl import job_keys_by_node, kill_left, slot_owner, start_workers, wait_until_done
from tests.support.crash_support import all_paths, check_items_exact, expected_requests, stored_items
from tests.support.hang import hang_guard
from tests.support.services import LOOPBACK, RedisCluster

pytestmark = [pytest.mark.crawl, pytest.mark.serial]

W = "host/0"
SITES = [f"site{i}.test" for i in range(24)]


def _client(port: int) -> redis.Redis:
    return redis.Redis(host=LOOPBACK, port=port, decode_responses=True, socket_timeout=10)


def _slot_of(cluster: RedisCluster, key: str) -> int:
    c = _client(cluster.nodes[0].port)
    try:
        return int(c.cluster("keyslot", key))
    finally:
        c.close()


def move_slot(cluster: RedisCluster, slot: int, dst_port: int, step: Callable[[str], None], batch: int = 3) -> None:
    """Move ``slot`` to the primary on ``dst_port`` as `redis-cli --cluster reshard` does:
    IMPORTING / MIGRATING, the keys MIGRATEd ``batch`` at a time, then the slot given to
    the new node on every primary. ``step`` is called at each stage ("migrating", then
    "partial" after each batch while keys are left)."""
    src_port = None
    primaries = cluster.primaries()
    for port in primaries:
        c = _client(port)
        try:
            if c.cluster("countkeysinslot", slot) or _owns(c, slot):
                src_port = port
        finally:
            c.close()
    assert src_port is not None and src_port != dst_port
    src, dst = _client(src_port), _client(dst_port)
    try:
        src_id, dst_id = src.cluster("myid"), dst.cluster("myid")
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        step("migrating")
        while keys := src.cluster("getkeysinslot", slot, batch):
            src.execute_command("MIGRATE", LOOPBACK, dst_port, "", 0, 10_000, "KEYS", *keys)
            if src.cluster("countkeysinslot", slot):
                step("partial")
        for port in [dst_port, src_port] + [p for p in primaries if p not in (src_port, dst_port)]:
            c = _client(port)
            try:
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            finally:
                c.close()
    finally:
        src.close()
        dst.close()


def _owns(c: redis.Redis, slot: int) -> bool:
    me = c.cluster("myid")
    for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end) and primary[2] == me:
            return True
    return False


#: slots `redis-cli --cluster reshard` moves at most in the crawl test (it takes the source's
#: lowest slots first; all 5461 of a primary took 30 s, longer than the crawl)
RESHARD_SLOTS = 600
#: the job's partitions in the crawl test: 14 per primary. Each partition's slot is in a window
#: of its own (16384 / S slots), so the lowest RESHARD_SLOTS slots of a primary hold partition
#: 0 and a site's partition with windows of 390 slots; with the default 12 (1,365 slots each)
#: they hold one partition, and moving two windows outlasts the crawl
RESHARD_PARTS = 42


def _job_for_reshard(cluster: RedisCluster, hosts: list[str]) -> tuple[str, int, int]:
    """A job name, the primary holding its run keys (partition 0) and how many slots to move
    from it so that partition 0 and at least one site's partition (of RESHARD_PARTS) move:
    both within the first RESHARD_SLOTS slots of that primary's lowest range."""
    c = _client(cluster.nodes[0].port)
    try:
        ranges = [(int(a), int(b), int(primary[1])) for a, b, primary, *_ in c.execute_command("CLUSTER", "SLOTS")]
    finally:
        c.close()
    first = {port: min(a for a, _, p in ranges if p == port) for _, _, port in ranges}
    parts = RESHARD_PARTS

    def where(key: str) -> tuple[int, int]:
        slot = key_slot(key.encode())
        return next(port for a, b, port in ranges if a <= slot <= b), slot

    for _ in range(100_000):
        job = f"rs-{uuid.uuid4().hex[:8]}"
        src, slot0 = where(f"{P.key_of(job, 0, parts)}:run")
        if src == cluster.nodes[0].port or slot0 - first[src] >= RESHARD_SLOTS:
            continue
        sites = [where(f"{P.key_of(job, P.partition_of(h, parts), parts)}:run") for h in hosts]
        moved = [slot for port, slot in sites if port == src and 0 <= slot - first[src] < RESHARD_SLOTS]
        if moved and any(port != src for port, _ in sites):
            return job, src, max([slot0, *moved]) - first[src] + 1
    raise AssertionError("no job name found")


class Waits:
    """The store's retry sleeps, counted (the store calls ``sleep`` only when it waits)."""

    def __init__(self) -> None:
        self.n = 0
        self.cond = threading.Condition()

    def __call__(self, seconds: float) -> None:
        with self.cond:
            self.n += 1
            self.cond.notify_all()
        time.sleep(min(seconds, 0.05))

    def wait_for(self, n: int, what: str) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.n >= n, hang_guard(30)), what


def test_a_script_for_a_moving_slot_waits_writes_nothing_and_runs_once_the_move_ends(
    redis_cluster: RedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    job = f"mv-{uuid.uuid4().hex[:8]}"
    store = open_store(redis_cluster.url, job, partitions=3)
    assert isinstance(store, RedisStore) and store.cluster
    waits = Waits()
    store.sleep = waits
    store.begin_run()
    urls = [f"http://{d}/{i}" for d in SITES for i in range(4)]
    store.enqueue([codec.new_request(Request(u)) for u in urls])
    store.counts()
    k = Counter(P.partition_of(d, 3) for d in SITES).most_common(1)[0][0]
    slot = _slot_of(redis_cluster, f"{store.keys[k]}:run")
    src = next(p for p in redis_cluster.primaries() if _owns(_client(p), slot))
    dst = next(p for p in redis_cluster.primaries() if p != src)
    before = int(_client(src).cluster("countkeysinslot", slot))
    got: list[Any] = []

    def lease() -> None:
        got.extend(store.lease(W, len(urls), 60))

    worker = threading.Thread(target=lease, daemon=True)
    stages: list[str] = []

    def step(stage: str) -> None:
        stages.append(stage)
        if stage == "migrating":
            worker.start()
            waits.wait_for(1, "the lease never waited for the moving slot")
            # refused before any write: not a key of the slot changed, none on the new node
            assert int(_client(src).cluster("countkeysinslot", slot)) == before
            assert int(_client(dst).cluster("countkeysinslot", slot)) == 0
        else:  # some keys here, some there: refused again, still nothing written
            seen = waits.n
            waits.wait_for(seen + 1, "the lease was not refused while the keys were split")
            on_both = int(_client(src).cluster("countkeysinslot", slot)) + int(
                _client(dst).cluster("countkeysinslot", slot)
            )
            assert on_both == before
            assert worker.is_alive()

    with caplog.at_level(logging.WARNING):
        move_slot(redis_cluster, slot, dst, step)
        worker.join(hang_guard(30))
    assert not worker.is_alive()
    assert "partial" in stages  # the keys really were split between the nodes for a while
    assert any("is moving to another Cluster node" in r.getMessage() for r in caplog.records)
    assert any("is back" in r.getMessage() for r in caplog.records)
    # moved: the partition's keys are on the new node only
    assert int(_client(src).cluster("countkeysinslot", slot)) == 0
    assert int(_client(dst).cluster("countkeysinslot", slot)) > 0
    # every record leased once, the moved partition's included; nothing lost or doubled
    assert sorted(codec.decode(x.data).url for x in got) == sorted(urls)
    assert store.counts() == {"pending": 0, "delayed": 0, "leased": len(urls), "done": 0, "failed": 0}
    store.ack(W, [(x.fingerprint, x.token) for x in got])
    info = store.finish_run()
    assert info is not None and info.counts["done"] == len(urls)
    # a client that starts after the move finds the partition on its new node
    again = open_store(redis_cluster.url, job)
    try:
        assert again.parts == 3 and again.status().counts["done"] == len(urls)
    finally:
        again.close()
        store.close()


@pytest.mark.timeout(480)
def test_a_reshard_of_the_primary_that_holds_the_run_during_a_crawl_stalls_nothing_and_loses_nothing(
    tmp_path: Path, redis_cluster: RedisCluster, mongo_uri: str
) -> None:
    """Three workers crawl a job spread over the shards (RESHARD_PARTS partitions); a third
    into the crawl (from the frontier's done count) `redis-cli --cluster reshard` moves
    the lowest slots of the primary that holds the job's run keys (partition 0, the seed
    feed, the shared egress health and pacing state) to another primary: the job is named
    so that they include partition 0's slot and a site's partition's. Every page is fetched
    once, every item stored once, every worker exits by itself."""
    store_url = f"{mongo_uri.rstrip('/')}/reshard_{uuid.uuid4().hex[:8]}"
    with Testbed(hosts=4, pages=120, seed=36, proxies=[ProxySpec("a"), ProxySpec("b")]) as tb:
        job, src, slots = _job_for_reshard(redis_cluster, tb.hosts)
        total = expected_requests(tb)
        dst = next(p for p in redis_cluster.primaries() if p != src)
        ids = {p: _client(p).cluster("myid") for p in (src, dst)}
        moving = [k for k in job_keys_by_node(redis_cluster, job).get(src, ())]  # none yet: the job starts
        assert not moving
        # 5 pages a second per site: the crawl lasts about 25 s, the reshard a few
        parts = {"SCALE_FRONTIER_PARTITIONS": RESHARD_PARTS}
        procs = start_workers(tb, redis_cluster, job, store_url, tmp_path, rate=5.0, settings=parts)
        store = open_store(redis_cluster.url, job, partitions=RESHARD_PARTS)
        try:
            wait_until_done(store, procs, total // 3)
            t0 = time.monotonic()
            reshard = subprocess.run(
                [redis_cluster.cli, "--cluster", "reshard", f"{LOOPBACK}:{src}"]
                + ["--cluster-from", ids[src], "--cluster-to", ids[dst], "--cluster-slots", str(slots)]
                + ["--cluster-yes", "--cluster-pipeline", "5"],
                capture_output=True,
                text=True,
                timeout=hang_guard(180),
                check=False,
            )
            done_after_reshard, took = store.counts()["done"], time.monotonic() - t0
            assert reshard.returncode == 0, reshard.stdout[-3000:] + reshard.stderr[-2000:]
            results = [p.finish(300) for p in procs]
            counts = store.counts()
        finally:
            store.close()
            kill_left(procs)  # a worker left running by a failed assertion
        served = Counter((r.host, r.path) for r in tb.log if r.status == 200 and r.kind == "ok")
        paths = all_paths(tb)
        check_items_exact(tb, stored_items(store_url))
        new_owner = slot_owner(redis_cluster, f"scale:{{{job}}}:run")
        by_node = job_keys_by_node(redis_cluster, job)
    # partition 0 and a site's partition moved to the other primary, and the job's keys
    # are on more than one primary
    assert new_owner == dst and len(by_node) > 1, by_node
    assert done_after_reshard < total, f"the crawl ended before the reshard ({took:.1f} s) did: nothing was tested"
    for r in results:
        assert r.returncode == 0, r.tail()  # every worker exited by itself
        assert "] ERROR:" not in r.log, r.tail()
    assert set(served) == paths, f"{len(paths - set(served))} pages never crawled"
    assert max(served.values()) == 1, [p for p, n in served.items() if n > 1][:5]  # every page once
    assert counts == {"pending": 0, "delayed": 0, "leased": 0, "done": total, "failed": 0}, counts
