"""Issue 35: hostile values in the real shared keys, files and records, against real crawls.

Each test writes the hostile value where workers read it back (the learned-pacing hash, the
workers hash, the heartbeats, the egress hashes and egress.db) and checks that the crawl
ends with every page, politely, and with one warning (per worker): the value is skipped or
clamped by the one decoder (scrapy_scale/shared_values.py), never a stall, a crash or a
worker pacing alone.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapy_scale.egress.shared import RedisState, SqliteState
from scrapy_scale.testbed import ProxySpec, Testbed
from scrapy_scale.throttle.shared import SqliteShared
from tests.crawl.test_commands import scale, status_json
from tests.crawl.test_egress_crawl import FAST
from tests.crawl.test_throttle_crawl import max_in_window, served
from tests.support.crawling import run_crawl, start_crawl

pytestmark = pytest.mark.crawl

#: JSON nested 100,000 deep: json.loads raised RecursionError, which no reader caught
DEEP = "[" * 100_000 + "]" * 100_000


def _ids(tb: Testbed) -> list[str]:
    return [f"127.0.0.1:{port}" for port in tb.proxy_ports.values()]


# ---- item 2: one bad field in the learned-pacing hash ------------------------------------


@pytest.mark.serial  # three workers, a measured rate
@pytest.mark.parametrize("hostile", ["string", "not-utf8", "deep-json"])
def test_a_bad_learned_pacing_hash_keeps_the_shared_limiter_on(
    tmp_path: Path, redis_url: str, redis_prefix: str, hostile: str
) -> None:
    """Issue 35 item 2: the learned-pacing key set to a string (WRONGTYPE), a non-UTF-8
    field name or JSON nested 100,000 deep made every worker log 'learned delays ... cannot
    be read; starting from the profiles' and pace alone: 3 workers at max_rate 2/s peaked at
    28-33 requests per 10 s. Now the bad field (or key) is skipped with one warning per
    worker, and the three share the limiter: no 10 s window holds more than max_rate allows."""
    with Testbed(hosts=1, pages=40, per_page=20, seed=35) as tb:
        host = tb.hosts[0]
        key = f"scale:{{{redis_prefix}}}:throttle:learned"
        r = redis.Redis.from_url(redis_url)
        if hostile == "string":
            r.set(key, "not a hash")
        elif hostile == "not-utf8":
            r.hset(key, mapping={b"\xff\xfe": json.dumps({"delay": 0.0, "at": time.time()}), host: b"\xff{}"})
        else:
            r.hset(key, host, DEEP)
        settings = {
            "SCALE_JOB": redis_prefix,
            "SCALE_FRONTIER_URL": redis_url,
            "SCALE_FRONTIER_BATCH": 8,
            "SCALE_DOMAIN_PROFILES": {host: {"max_rate": 2.0, "start_delay": 0.0}},
            "ROBOTSTXT_OBEY": False,
        }
        procs = [start_crawl(tb, {**settings, "SCALE_FRONTIER_WORKER": f"w{i}"}, tmp_path) for i in range(3)]
        results = [p.finish(300) for p in procs]
        times = [x.time for x in served(tb, host)]
        kind = r.type(key)
        r.close()
    for res in results:
        assert res.returncode == 0, res.tail()
        # (not "no Traceback": workers of one job on one state folder race on the quality
        # report's temporary file, scrapy_scale/quality/report_build.py, a matter of its own)
        assert "cannot be read" not in res.log and "[scrapy_scale.throttle] ERROR" not in res.log, res.tail()
    said = "is not a hash; deleted" if hostile == "string" else "skipping 1 unreadable field(s)"
    if hostile == "not-utf8":
        said = "unreadable field(s) of"
    counts = [res.log.count(said) for res in results]
    assert max(counts) == 1 and sum(counts) >= 1, counts  # one warning per worker at most
    if hostile == "not-utf8":
        assert counts == [1, 1, 1], counts  # the field no worker writes stays: each read it
    assert kind == b"hash"  # the learned state is shared again
    assert len(times) == 40 + 2  # every page once (2 listing pages)
    assert sum(res.stats.get("item_scraped_count", 0) for res in results) == 40
    # the shared limiter held: 2/s for the three together (pacing alone gave 28-33 per 10 s)
    assert max_in_window(times, 10.0) <= 21, max_in_window(times, 10.0)


# ---- item 3: a huge but finite learned delay -----------------------------------------------


@pytest.mark.paced  # one worker, a few requests a second
def test_a_huge_learned_delay_on_the_site_and_its_routes_is_not_used(tmp_path: Path) -> None:
    """Issue 35 item 3: a learned delay of 1e6 s on the site key (and on each route to it)
    was clamped to max_delay without a word: 10 pages in 240 s. It is not used, with one
    warning per key, as the other learned spacings above max_delay."""
    with Testbed(hosts=1, pages=20, per_page=20, seed=36, proxies=[ProxySpec("p1"), ProxySpec("p2")]) as tb:
        host = tb.hosts[0]
        db = SqliteShared(str(tmp_path / "state" / "throttle.db"), "catalog")
        now = time.time()
        keys = [host, *(f"{host} via {e}" for e in _ids(tb))]
        db.save({k: {"delay": 1e6, "too_fast": 0.0, "too_fast_at": 0.0, "at": now} for k in keys})
        db.close()
        settings = {
            "SCALE_EGRESSES": tb.proxy_urls,
            "SCALE_DOMAIN_PROFILES": {host: {"min_delay": 0.2, "start_delay": 0.2}},
            "ROBOTSTXT_OBEY": False,
        }
        res = run_crawl(tb, settings, tmp_path, timeout=120)
        times = [x.time for x in served(tb, host)]
    assert res.returncode == 0, res.tail()
    assert len(res.items) == 20
    for k in keys:
        said = f"throttle: learned pacing of {k} read back: delay 1e+06 s is above max_delay 60 s; not used"
        assert res.log.count(said) == 1, (k, res.tail())
    # paced by the profile: no faster than min_delay on average, far from 60 s a page
    gap = (times[-1] - times[0]) / (len(times) - 1)
    assert 0.2 - 0.01 <= gap < 2.0, gap


# ---- item 5: a bad pid in the workers hash, a ghost heartbeat --------------------------------


@pytest.mark.parametrize("pid", ["notapid", "1" * 20, "\xff"])
def test_a_bad_pid_in_the_workers_hash_frees_its_slot_and_a_ghost_heartbeat_is_skipped(
    tmp_path: Path, redis_url: str, redis_prefix: str, pid: str
) -> None:
    """Issue 35 item 5: "notapid" in the workers hash crashed every worker of that host at
    start (ValueError in claim_worker; a 20-digit pid: OverflowError), and a heartbeat of
    1e300 showed a ghost live worker for ever."""
    with Testbed(hosts=1, pages=20, per_page=20, seed=37) as tb:
        r = redis.Redis.from_url(redis_url)
        base = f"scale:{{{redis_prefix}}}"
        raw = pid.encode("latin-1") if pid == "\xff" else pid.encode()
        r.hset(f"{base}:workers", f"{socket.gethostname()}/0", raw)
        r.hset(f"{base}:alive", "ghost/0", f"{time.time()!r} 1e300")
        r.hset(f"{base}:alive", b"\xff\xfe", b"\xff")
        settings = {"SCALE_JOB": redis_prefix, "SCALE_FRONTIER_URL": redis_url, "ROBOTSTXT_OBEY": False}
        res = run_crawl(tb, settings, tmp_path, timeout=120)
        expected = tb.detail_urls()
        claimed = r.hget(f"{base}:workers", f"{socket.gethostname()}/0")
        r.close()
    assert res.returncode == 0 and "Traceback" not in res.log, res.tail()
    assert res.item_urls == expected
    assert res.log.count("in the shared workers table is not a pid; its slot is taken as free") == 1, res.tail()
    assert claimed is not None and claimed.isdigit() and claimed != raw  # the slot was claimed
    st = status_json(redis_prefix, {"SCALE_FRONTIER_URL": redis_url})
    # no ghost worker alive for ever (the run's state is "running" while one is live)
    assert "ghost/0" not in st["workers"] and st["live_workers"] == [], st["workers"]
    assert st["run"]["state"] == "finished", st["run"]


# ---- item 6: bad egress shared state -------------------------------------------------------


def _egress_settings(tb: Testbed, **more: Any) -> dict[str, Any]:
    return {
        "SCALE_EGRESSES": tb.proxy_urls,
        "SCALE_RETRY_POLICY": FAST,
        "SCALE_EGRESS_SYNC": 0.2,
        "DOWNLOAD_DELAY": 0.05,
        **more,
    }


@pytest.mark.parametrize("hostile", ["string", "deep-json"])
def test_bad_egress_state_in_redis_keeps_the_sync_going(
    tmp_path: Path, redis_url: str, redis_prefix: str, hostile: str
) -> None:
    """Issue 35 item 6 (Redis): the health key set to a string or to deep JSON raised in
    EgressMiddleware.spider_opened ('Error caught on signal handler'): the sync loop never
    started and quarantines were never shared; deep JSON in the counts key dropped the pool
    from `status`."""
    with Testbed(hosts=1, pages=20, seed=38, proxies=[ProxySpec("p1"), ProxySpec("p2")]) as tb:
        st = RedisState(redis_url, redis_prefix)
        a = _ids(tb)[0]
        if hostile == "string":
            st.r.set(st.k_health, "not a hash")
        else:
            st.r.hset(st.k_health, mapping={a: DEEP, f"{a}|x.test": DEEP, f"{a}|y.test": b"\xff"})
        st.r.hset(st.k_counts, "ghost/1", DEEP)
        st.r.hset(st.k_counts, b"\xff\xfe", b"{}")
        settings = _egress_settings(tb, SCALE_JOB=redis_prefix, SCALE_FRONTIER_URL=redis_url)
        res = run_crawl(tb, settings, tmp_path, timeout=120)
        expected = tb.detail_urls()
        kind = st.r.type(st.k_health)
        counts = st.r.hgetall(st.k_counts)
        st.close()
    assert res.returncode == 0, res.tail()
    assert res.item_urls == expected
    for bad in ("Error caught on signal handler", "cannot sync the pool's state", "final sync", "Traceback"):
        assert bad not in res.log, (bad, res.tail())
    if hostile == "string":
        assert res.log.count("egress: shared state key") == 1, res.tail()
    else:
        assert res.log.count("egress: skipping health record") == 1, res.tail()
    assert kind == b"hash"  # the sync writes the health records again
    mine = [json.loads(v) for k, v in counts.items() if k not in (b"ghost/1", b"\xff\xfe")]
    assert len(mine) == 1 and sum(mine[0]["requests"].values()) >= len(expected)  # the sync ran
    p = scale("status", redis_prefix, "--json", settings={"SCALE_FRONTIER_URL": redis_url})
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "egress state unavailable" not in p.stderr, p.stderr
    assert sorted(row["egress"] for row in json.loads(p.stdout)["egress"]) == sorted(_ids(tb))


def test_deep_json_in_egress_db_keeps_the_sync_going(tmp_path: Path) -> None:
    """Issue 35 item 6 (egress.db): deep JSON in a health row raised RecursionError in
    spider_opened and at every sync; deep JSON in a counts row dropped the pool from status."""
    with Testbed(hosts=1, pages=20, seed=39, proxies=[ProxySpec("p1")]) as tb:
        (a,) = _ids(tb)
        st = SqliteState(str(tmp_path / "state" / "egress.db"), "catalog")
        st.db.execute("INSERT INTO egress_health VALUES ('catalog', ?, ?)", (a, DEEP))
        st.db.execute("INSERT INTO egress_counts VALUES ('catalog', 'ghost/1', ?)", (DEEP,))
        st.close()
        res = run_crawl(tb, _egress_settings(tb), tmp_path, timeout=120)
        expected = tb.detail_urls()
    assert res.returncode == 0, res.tail()
    assert res.item_urls == expected
    for bad in ("Error caught on signal handler", "cannot sync the pool's state", "final sync", "Traceback"):
        assert bad not in res.log, (bad, res.tail())
    assert res.log.count(f"egress: skipping health record '{a}'") == 1, res.tail()
    st = SqliteState(str(tmp_path / "state" / "egress.db"), "catalog")
    state = st.read_all()
    st.close()
    assert isinstance(state["health"].get(a), dict)  # written over by the sync
    assert len([w for w in state["counts"] if w != "ghost/1"]) == 1  # this worker's counts were synced
    p = scale("status", "catalog", "--json", settings={"SCALE_STATE_DIR": str(tmp_path / "state")})
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert [row["egress"] for row in json.loads(p.stdout)["egress"]] == [a]
    assert "counts of worker 'ghost/1' skipped" in p.stderr, p.stderr


def test_workers_snapshots_in_redis_skip_deep_json_non_utf8_and_ghosts(redis_url: str, redis_prefix: str) -> None:
    """The watch snapshots' hash (scale:{JOB}:monitor) read back: deep JSON raised
    RecursionError out of RedisSink.read, and "until": 1e300 kept a ghost worker in
    `scrapy scale watch` for ever."""
    import logging

    from scrapy_scale.monitor.worker_status import RedisSink, merge, valid

    sink = RedisSink(redis_url, redis_prefix)
    now = time.time()
    try:
        sink.write("good", {"worker": "good", "until": now + 10, "items_stored": 3})
        ghost = f"ghost-{redis_prefix}"  # warnings are once per worker name in a process: its own
        sink.write(ghost, {"worker": ghost, "until": 1e300, "items_stored": 1})
        sink.r.hset(sink.key, mapping={"deep": DEEP, "bytes": b"\xff{}", b"\xfe": b"{}"})
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append  # type: ignore[method-assign]
        log = logging.getLogger("scrapy_scale.monitor.worker_status")
        log.addHandler(handler)
        try:
            for _ in range(3):
                docs = valid(sink.read(), now)
        finally:
            log.removeHandler(handler)
    finally:
        sink.r.delete(sink.key)
        sink.close()
    assert [d["worker"] for d in docs] == ["good"] and merge(docs)["items_stored"] == 3
    said = [r.getMessage() for r in records]
    assert len(said) == 2, said  # the unreadable fields once, the ghost once: not per read
    assert "3 unreadable field(s)" in said[0] and ghost in said[1], said


def test_status_reads_a_learned_key_of_another_type_as_none_and_leaves_it(redis_url: str, redis_prefix: str) -> None:
    """`scrapy scale status` only reads: a learned-pacing key holding a string is shown as no
    learned pacing (no traceback), and left for a worker to delete (with its warning)."""
    from scrapy.settings import Settings

    from scrapy_scale.throttle import status as pacing_status

    key = f"scale:{{{redis_prefix}}}:throttle:learned"
    r = redis.Redis.from_url(redis_url)
    try:
        r.set(key, "not a hash")
        assert pacing_status.read(Settings({"SCALE_THROTTLE_URL": redis_url}), redis_prefix) == []
        assert r.type(key) == b"string"
    finally:
        r.delete(key)
        r.close()


def test_a_feed_message_of_deep_json_or_not_utf8_is_refused_and_the_feed_goes_on(
    redis_url: str, redis_prefix: str
) -> None:
    """The feed list is shared state too: a message of JSON nested 100,000 deep raised
    RecursionError, and one that is not UTF-8 UnicodeDecodeError, out of every sync while the
    message stayed in the worker's taken list: no feed message was read again, for ever."""
    from tests.crawl.test_frontier_seeding import FEED_MSGS, _feed_scheduler

    sched = _feed_scheduler(redis_url, redis_prefix)
    store = sched.store
    try:
        r, feed = store.r, store.feed_key  # type: ignore[attr-defined]
        r.rpush(feed, DEEP, b"\xff\xfe", *FEED_MSGS)
        sched.sync_blocking()
        assert not r.llen(feed) and not r.exists(store.taken_key(sched.worker))  # type: ignore[attr-defined]
        c = store.counts()
        assert c["pending"] + c["leased"] == 8  # every good message, once
        assert sched.crawler.stats.get_value("scale/frontier/feed_refused") == 2
    finally:
        store.close()
