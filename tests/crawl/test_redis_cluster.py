"""A private Redis Cluster (3 primaries, a replica each, AOF on): every Redis client of the
project opens it from the URL of one node (scrapy_scale/redis_open.py) and finds the
others, and three workers crawl a whole job on it with egresses and shared pacing on.

Each job is named so that its hash tag's slot is served by another primary than the node
of the URL: a single-node client of that node is answered ``MOVED`` (asserted), which is
what the limiter, the egress health and the watch snapshots got before they used the
opener."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis
from redis.exceptions import MovedError

from scrapy_scale.egress.shared import RedisState
from scrapy_scale.frontier import open_store
from scrapy_scale.frontier.backends.redis import partitions as P
from scrapy_scale.monitor.worker_status import RedisSink
from scrapy_scale.redis_open import RedisOpenError, is_cluster, open_redis
from scrapy_scale.testbed import ProxySpec, Testbed
from scrapy_scale.throttle.shared import RedisShared
from tests.support.cluster_crawl import job_keys_by_node, kill_left, slot_owner, start_workers, wait_until_done
from tests.support.crash_support import all_paths, check_items_exact, expected_requests, stored_items
from tests.support.hang import hang_guard
from tests.support.services import LOOPBACK, RedisCluster, free_port

pytestmark = pytest.mark.crawl


def _job_elsewhere(cluster: RedisCluster) -> str:
    """A job name whose keys live on another primary than the URL's node."""
    for _ in range(100):
        job = f"cl-{uuid.uuid4().hex[:8]}"
        if slot_owner(cluster, f"scale:{{{job}}}:run") != cluster.nodes[0].port:
            return job
    raise AssertionError("every job name hashed to the first node")


def _job_spread(cluster: RedisCluster, hosts: list[str]) -> str:
    """A job name whose run keys live on another primary than the URL's node, and whose
    sites' partitions (the Cluster default: 4 per primary) are on more than one primary."""
    parts = P.default_parts(3)
    for _ in range(200):
        job = _job_elsewhere(cluster)
        owners = {slot_owner(cluster, f"{P.key_of(job, P.partition_of(h, parts), parts)}:run") for h in hosts}
        if len(owners) > 1:
            return job
    raise AssertionError("no job name spread its sites over two primaries")


def _replica_of(cluster: RedisCluster, primary: int) -> redis.Redis:
    """A client of the replica of the primary on port ``primary``."""
    node = redis.Redis(host=LOOPBACK, port=cluster.nodes[0].port)
    try:
        for _start, _end, owner, *replicas in node.cluster("slots"):
            if int(owner[1]) == primary and replicas:
                return redis.Redis(host=LOOPBACK, port=int(replicas[0][1]))
    finally:
        node.close()
    raise AssertionError(f"the primary on {primary} has no replica")


def _moved_for_single_node(cluster: RedisCluster, key: str) -> bool:
    """Does a plain single-node client of the URL's node get MOVED for ``key``?"""
    node = redis.Redis.from_url(cluster.url)
    try:
        node.exists(key)
    except MovedError:
        return True
    finally:
        node.close()
    return False


@pytest.mark.serial
@pytest.mark.timeout(120)
def test_every_component_opens_the_cluster_from_one_node_and_finds_the_keys_elsewhere(
    redis_cluster: RedisCluster,
) -> None:
    job = _job_elsewhere(redis_cluster)
    assert _moved_for_single_node(redis_cluster, f"scale:{{{job}}}:monitor")
    client = open_redis(redis_cluster.url)
    assert is_cluster(client)
    client.close()

    # the shared limiter: a grant, then a wait, both through the Lua script on the other node
    shared = RedisShared(redis_cluster.url, job)
    try:
        assert is_cluster(shared.client)
        assert shared.acquire("example.com", 10.0) == 0.0
        assert shared.acquire("example.com", 10.0) > 5.0
        shared.save({"example.com": {"d": 1.5}})
        assert shared.load() == {"example.com": {"d": 1.5}}
    finally:
        shared.close()

    # the egress health: the script and the pipeline of a sync
    state = RedisState(redis_cluster.url, job)
    try:
        assert is_cluster(state.r) and not state.script_in_pipeline
        health, live = state.sync("w0", {"127.0.0.1:1": {"state": "ok", "c": 1.0}}, {"ok": 1}, 100.0)
        assert "127.0.0.1:1" in health and live == {"w0": 100.0}
        state.set_pool({"127.0.0.1:1": "g"})
        assert set(state.read_all()["pool"]) == {"127.0.0.1:1"}
    finally:
        state.close()

    # the worker snapshots that watch and status read
    sink = RedisSink(redis_cluster.url, job)
    try:
        sink.write("w0", {"worker": "w0"})
        assert sink.read() == [{"worker": "w0"}]
    finally:
        sink.close()

    # the frontier, its seed feed included
    store = open_store(redis_cluster.url, job)
    try:
        assert store.cluster
        store.begin_run()
        assert store.counts()["pending"] == 0
    finally:
        store.close()

    owner = slot_owner(redis_cluster, f"scale:{{{job}}}:run")
    on_owner = set(redis_cluster.node_keys(owner, f"scale:{{{job}}}:*"))
    assert {f"scale:{{{job}}}:{k}" for k in ("monitor", "egress:health", "throttle:learned")} <= on_owner
    assert any(":throttle:rate:" in k for k in on_owner), on_owner
    assert not redis_cluster.node_keys(redis_cluster.nodes[0].port, f"scale:{{{job}}}:*")


@pytest.mark.serial
@pytest.mark.timeout(120)
def test_a_jobs_default_partitions_split_evenly_over_the_primaries(redis_cluster: RedisCluster) -> None:
    """Each partition's hash tag is chosen by slot: with the Cluster's default count (4 per
    primary) every job's partitions are 4 on each primary, whatever the job's name (where
    ``redis-cli --cluster create`` put each slot, asked of the Cluster)."""
    primaries = sorted(redis_cluster.primaries())
    for n in range(8):
        job = f"even-{n}-{uuid.uuid4().hex[:6]}"
        store = open_store(redis_cluster.url, job)
        try:
            store.begin_run()
            keys = list(store.keys)
        finally:
            store.close()
        assert len(keys) == 12
        owners = Counter(slot_owner(redis_cluster, f"{k}:run") for k in keys)
        assert owners == {p: 4 for p in primaries}, (job, owners)
        # and every partition's run copy really is on the primary its slot names
        for port in primaries:
            on_node = {k.rsplit(":", 1)[0] for k in redis_cluster.node_keys(port, f"*{job}*:run")}
            assert on_node == {k for k in keys if slot_owner(redis_cluster, f"{k}:run") == port}


def test_a_node_that_cannot_be_reached_is_one_line_without_the_password() -> None:
    url = f"redis://:hunter2@{LOOPBACK}:{free_port()}/0"
    with pytest.raises(RedisOpenError) as got:
        open_redis(url, socket_connect_timeout=2)
    msg = str(got.value)
    assert "\n" not in msg and "hunter2" not in msg and "***@" in msg, msg


@pytest.mark.serial
@pytest.mark.timeout(420)
def test_three_workers_crawl_a_whole_job_on_a_cluster_with_egresses_and_shared_pacing(
    tmp_path: Path, redis_cluster: RedisCluster, mongo_uri: str
) -> None:
    store_url = f"{mongo_uri.rstrip('/')}/cluster_{uuid.uuid4().hex[:8]}"
    with Testbed(hosts=3, pages=60, seed=34, proxies=[ProxySpec("a"), ProxySpec("b")]) as tb:
        job = _job_spread(redis_cluster, tb.hosts)
        total = expected_requests(tb)
        procs = start_workers(tb, redis_cluster, job, store_url, tmp_path)
        results = [p.finish(360) for p in procs]
        served = Counter((r.host, r.path) for r in tb.log if r.status == 200 and r.kind == "ok")
        paths = all_paths(tb)
        check_items_exact(tb, stored_items(store_url))
        owner = slot_owner(redis_cluster, f"scale:{{{job}}}:run")
        keys = set(redis_cluster.node_keys(owner, f"scale:{{{job}}}:*"))
        node = redis.Redis(host=LOOPBACK, port=owner)
        try:
            in_slot = int(node.cluster("countkeysinslot", int(node.cluster("keyslot", f"scale:{{{job}}}:run"))))
        finally:
            node.close()
        by_node = job_keys_by_node(redis_cluster, job)
        store = open_store(redis_cluster.url, job)
        try:
            counts = store.counts()
            parts = store.parts
        finally:
            store.close()
    for r in results:
        assert r.returncode == 0, r.tail()  # every worker exited by itself
        assert r.stats.get("scale/frontier/acked", 0) > 0, r.tail()  # and did a share of the work
        # no component failed on the Cluster (a single-node client logs its MOVED as an error,
        # or pacing warns that its learned delays cannot be read and goes on alone)
        assert "] ERROR:" not in r.log and "CROSSSLOT" not in r.log, r.tail()
        for failed in ("cannot be read", "shared limiter failed", "publishing failed", "sync with"):
            assert failed not in r.log, r.tail()
    assert set(served) == paths, f"{len(paths - set(served))} pages never crawled"
    assert max(served.values()) == 1, [p for p, n in served.items() if n > 1][:5]  # every page once
    assert counts == {"pending": 0, "delayed": 0, "leased": 0, "done": total, "failed": 0}, counts
    # the state really was on the Cluster, on the primary of the job's slot, not the URL's node
    assert owner != redis_cluster.nodes[0].port
    assert _moved_for_single_node(redis_cluster, f"scale:{{{job}}}:run")
    assert f"scale:{{{job}}}:egress:health" in keys or f"scale:{{{job}}}:egress:live" in keys, keys
    assert any(":throttle:rate:" in k for k in keys), keys  # the shared limiter's GCRA keys
    assert in_slot == len(keys) > 0
    # one job across the shards: the Cluster default of 4 partitions per primary, and the
    # sites' partitions (each its own slot) on more than one primary
    assert parts == 12
    assert len(by_node) > 1, by_node
    used = {P.key_of(job, P.partition_of(h, parts), parts) for h in tb.hosts}
    assert all(any(k.startswith(f"{u}:") for ks in by_node.values() for k in ks) for u in used), (used, by_node)
    # the requests went through the egresses
    assert sum(r.stats.get("scale/egress/requests", 0) for r in results) >= total


@pytest.mark.serial
@pytest.mark.timeout(420)
def test_the_jobs_primary_killed_mid_crawl_its_replica_takes_over_and_the_workers_finish(
    tmp_path: Path, redis_cluster: RedisCluster, mongo_uri: str
) -> None:
    """kill -9 of the primary that holds the job's slot, a third into the crawl (chosen from
    the frontier's done count). Its replica takes over once a worker has logged that the
    frontier is unreachable (its automatic failover is held back until then with
    cluster-replica-no-failover, then CLUSTER FAILOVER TAKEOVER: left alone it can be
    promoted within redis-py's own silent retries, and the outage would not always be
    seen); the workers wait meanwhile, reconnect to the new primary and finish the job."""
    job = _job_elsewhere(redis_cluster)
    store_url = f"{mongo_uri.rstrip('/')}/cluster_{uuid.uuid4().hex[:8]}"
    owner = slot_owner(redis_cluster, f"scale:{{{job}}}:run")
    primary = next(n for n in redis_cluster.nodes if n.port == owner)
    with Testbed(hosts=3, pages=150, seed=35, proxies=[ProxySpec("a"), ProxySpec("b")]) as tb:
        total = expected_requests(tb)
        procs = start_workers(tb, redis_cluster, job, store_url, tmp_path)
        store = open_store(redis_cluster.url, job)
        try:
            wait_until_done(store, procs, total // 3)
            replica = _replica_of(redis_cluster, owner)
            replica.config_set("cluster-replica-no-failover", "yes")
            primary.kill()
            deadline = time.monotonic() + hang_guard(60)
            while not any("unreachable" in p.result().log for p in procs):
                dead = [p for p in procs if p.poll() is not None]
                assert not dead, dead[0].result().tail()
                assert time.monotonic() < deadline, "no worker saw the primary go"
                time.sleep(0.05)
            assert replica.execute_command("CLUSTER FAILOVER", "TAKEOVER") in (b"OK", "OK", True)
            replica.close()
            results = [p.finish(300) for p in procs]
            counts = store.counts()
        finally:
            store.close()
            kill_left(procs)  # a worker left running by a failed assertion
        served = Counter((r.host, r.path) for r in tb.log if r.status == 200 and r.kind == "ok")
        paths = all_paths(tb)
        check_items_exact(tb, stored_items(store_url))
        new_owner = slot_owner(redis_cluster, f"scale:{{{job}}}:run")
    for r in results:
        assert r.returncode == 0, r.tail()  # every worker exited by itself
    assert new_owner != owner  # the replica was promoted
    logs = "".join(r.log for r in results)
    assert "unreachable" in logs and "is back" in logs, [r.tail() for r in results]
    assert set(served) == paths, f"{len(paths - set(served))} pages never crawled"
    assert counts == {"pending": 0, "delayed": 0, "leased": 0, "done": total, "failed": 0}, counts
