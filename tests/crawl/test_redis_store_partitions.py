"""A job's Redis frontier in partitions, on a real Redis (the shared one; the slot moves on a
private Cluster): records land in their site's partition, counts and status sum over the
partitions, the run ends only when every partition is done, the lost-data check looks at
each partition, and the partition count is fixed for the job's life (another count is
refused with one line at start, a hostile stored one too). The frontier's conformance
suites also run with 3 partitions (tests/crawl/test_frontier_store.py,
tests/crawl/test_frontier_contracts.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from scrapy import Request

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier import codec
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.backends.redis import RedisStore
from scrapy_scale.frontier.backends.redis import partitions as P
from scrapy_scale.frontier.store import EnqueueResult, FrontierError, FrontierFatal, domain_of
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl

W = "host/0"
SITES = [f"site{i}.test" for i in range(12)]


def req(url: str, **kw: Any):
    return codec.new_request(Request(url), **kw)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def opened(redis_url: str, redis_prefix: str, clock: FakeClock) -> Iterator[Any]:
    stores: list[RedisStore] = []

    def make(parts: int | None = 3, job: str | None = None) -> RedisStore:
        s = open_store(redis_url, job or redis_prefix, clock=clock, partitions=parts)
        assert isinstance(s, RedisStore)
        stores.append(s)
        return s

    yield make
    for s in stores:
        s.close()


def _raw(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url, decode_responses=True)


def test_a_sites_partition_is_the_same_in_another_process() -> None:
    """Python's own hash() changes per process (PYTHONHASHSEED): the partition must not."""
    here = [P.partition_of(d, 12) for d in SITES * 10]
    code = (
        "from scrapy_scale.frontier.backends.redis import partitions as P;"
        f"print([P.partition_of(d, 12) for d in {SITES * 10!r}])"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == str(here)


def test_records_land_in_their_sites_partition_and_counts_and_status_sum(opened, redis_url: str) -> None:
    s = opened(3)
    s.begin_run()
    urls = [f"http://{d}/{i}" for d in SITES for i in range(3)]
    assert s.enqueue_new([req(u) for u in urls[::2]]) == len(urls[::2])
    s.enqueue([req(u) for u in urls[1::2]])
    r = _raw(redis_url)
    rid = s.current_run().run_id  # type: ignore[union-attr]
    used = set()
    for u in urls:
        f = codec.default_fingerprint(Request(u))
        part = P.partition_of(domain_of(u), 3)
        used.add(part)
        assert r.exists(f"{s.keys[part]}:{rid}:r:{f}"), (u, part)
    assert used == {0, 1, 2}  # the 12 sites spread over the 3 partitions
    assert s.counts()["pending"] == len(urls)
    leased = s.lease(W, 10, 60)
    assert len(leased) == 10
    assert len({P.partition_of(x.domain, 3) for x in leased}) == 3  # a batch from every partition
    s.ack(W, [(x.fingerprint, x.token) for x in leased[:4]])
    s.fail(W, [(x.fingerprint, x.token, "fatal", "400") for x in leased[4:6]])
    s.dead_letter(leased[6].fingerprint, "undecodable")
    st = s.status()
    assert st.counts == {"pending": 26, "delayed": 0, "leased": 3, "done": 4, "failed": 2}, st.counts
    assert st.failed_by_class == {"fatal": 2}
    assert st.leases_by_worker == {W: 3}
    assert st.dead_letters == 1 == s.dead_letter_count() == len(s.dead_letters())
    assert s.counts() == st.counts
    # a command opens the job without the setting: the stored count
    reader = opened(None)
    assert reader.parts == 3 and reader.status().counts == st.counts


def test_the_run_ends_only_when_every_partition_is_done(opened) -> None:
    s = opened(3)
    s.begin_run()
    s.enqueue([req(f"http://{d}/") for d in SITES])
    held = []
    for x in s.lease(W, 100, 60):
        if P.partition_of(x.domain, 3) != 2:
            s.ack(W, [(x.fingerprint, x.token)])
        else:
            held.append((x.fingerprint, x.token))
    assert held and s.finish_run() is None  # partition 2 still has leased records
    s.ack(W, held)
    for x in s.lease(W, 100, 60):
        s.ack(W, [(x.fingerprint, x.token)])
    info = s.finish_run()
    assert info is not None and info.counts == {"pending": 0, "delayed": 0, "leased": 0, "done": 12, "failed": 0}


def test_a_request_written_to_another_partition_while_partition_0_finishes_reopens_the_run(opened) -> None:
    """The parent is acked in partition 0 after its child went to partition 2, between the
    check of the other partitions and partition 0's finish: the run must go on."""
    s = opened(3)
    other = opened(3)
    s.begin_run()
    other.begin_run()
    parent = next(d for d in SITES if P.partition_of(d, 3) == 0)
    child = next(d for d in SITES if P.partition_of(d, 3) == 2)
    s.enqueue([req(f"http://{parent}/")])
    (x,) = s.lease(W, 1, 60)
    ran = []
    real = other.conn.call_at

    def call_at(part: int, script: str, *args: Any) -> Any:
        if part == 0 and script == "run" and args[0] == "finish" and not ran:
            # the worker that holds the parent writes its child, then acks the parent
            s.enqueue([req(f"http://{child}/")])
            s.ack(W, [(x.fingerprint, x.token)])
            ran.append(True)
        return real(part, script, *args)

    other.conn.call_at = call_at  # type: ignore[method-assign]
    s.ack(W, [])
    assert not other.open_counts(2)["pending"]  # type: ignore[index]  # partition 2 is empty when the finish starts
    assert other.finish_run() is None
    assert ran  # the child really was written in the window
    run = other.current_run()
    assert run is not None and run.ended_at is None  # reopened
    assert other.counts()["pending"] == 1


def test_a_partition_that_lost_its_state_is_fatal(opened, redis_url: str) -> None:
    s = opened(3)
    s.begin_run()
    s.enqueue([req(f"http://{d}/") for d in SITES])
    s.counts()
    r = _raw(redis_url)
    rid = s.current_run().run_id  # type: ignore[union-attr]
    # partition 1 as an older snapshot has it (its shard restarted from one): a record fewer
    assert int(r.hget(f"{s.keys[1]}:{rid}:cnt", "pending") or 0) > 0
    r.hincrby(f"{s.keys[1]}:{rid}:cnt", "pending", -1)
    with pytest.raises(FrontierFatal, match=r"partition 1 of 3\).*fewer than"):
        s.counts()
    # the run marker of partition 2 gone (its shard flushed)
    s2 = opened(3)
    s2.begin_run()
    s2.counts()
    r.delete(f"{s2.keys[2]}:run")
    with pytest.raises(FrontierFatal, match=r"partition 2 of 3\).*run marker .*/p2\.\d+\}:run is gone"):
        s2.counts()


def test_another_partition_count_is_refused_the_stored_one_is_used_and_reset_frees_it(opened) -> None:
    s = opened(3)
    s.begin_run()
    s.enqueue([req(f"http://{d}/") for d in SITES])
    with pytest.raises(FrontierError) as e:
        opened(4)
    msg = str(e.value)
    assert "started with SCALE_FRONTIER_PARTITIONS = 3 and this worker has 4" in msg and "\n" not in msg
    assert opened(3).counts()["pending"] == 12
    s.reset()
    fresh = opened(4)
    fresh.begin_run()
    assert fresh.parts == 4 and opened(None).parts == 4


def test_a_job_started_before_partitions_is_one_partition(opened, redis_url: str) -> None:
    s = opened(1)
    s.begin_run()
    s.enqueue([req(f"http://{d}/") for d in SITES])
    _raw(redis_url).hdel(f"{s.key}:run", P.FIELD)  # as a job of an earlier version has it
    assert opened(None).parts == 1
    with pytest.raises(FrontierError, match="started with SCALE_FRONTIER_PARTITIONS = 1 and this worker has 3"):
        opened(3)
    again = opened(None)
    again.begin_run()
    assert again.counts()["pending"] == 12 and len(again.lease(W, 20, 60)) == 12


@pytest.mark.parametrize("raw", ["abc", "0", "99999999", "-2", "\udcff", "3/slots", "3/", "3/slot/x", "3/\udcff"])
def test_a_hostile_stored_partition_count_is_refused_with_one_line(opened, redis_url: str, raw: str) -> None:
    s = opened(3)
    s.begin_run()
    r = redis.Redis.from_url(redis_url)
    r.hset(f"{s.key}:run", P.FIELD, raw.encode("utf-8", "surrogateescape"))
    for parts in (None, 3):
        with pytest.raises(FrontierError) as e:
            opened(parts)
        msg = str(e.value)
        assert "partition count" in msg and "is unusable" in msg and "\n" not in msg, msg


def test_a_new_job_stores_its_naming_and_its_partitions_are_named_by_slot(opened, redis_url: str) -> None:
    s = opened(3)
    s.begin_run()
    s.enqueue([req(f"http://{d}/") for d in SITES])
    r = _raw(redis_url)
    assert r.hget(f"{s.key}:run", P.FIELD) == "3/slot"
    assert s.keys == P.Layout(3).keys(s.job) and all(r.exists(f"{k}:run") for k in s.keys)
    assert not r.keys(f"scale:{{{s.job}/p1}}*")  # nothing under the first naming
    assert opened(None).keys == s.keys


def test_a_job_of_the_first_naming_keeps_its_keys_until_a_reset(opened, redis_url: str) -> None:
    """A job that the first partitioned release started (count alone in the run record, its
    partitions ``{JOB/pi}``) is read and written under those names, never others; after
    ``scrapy scale reset`` its next start names its partitions by slot."""
    old = opened(3)
    old.use_layout(P.Layout(3, by_slot=False))  # what that release did: the same scripts and names
    old.begin_run()
    old.enqueue([req(f"http://{d}/") for d in SITES])
    r = _raw(redis_url)
    assert r.hget(f"{old.key}:run", P.FIELD) == "3"
    assert all(r.exists(f"scale:{{{old.job}/p{i}}}:run") for i in (1, 2))
    for parts in (None, 3):
        w = opened(parts)
        assert w.keys == [f"scale:{{{old.job}}}", f"scale:{{{old.job}/p1}}", f"scale:{{{old.job}/p2}}"]
    w.begin_run()
    assert w.counts()["pending"] == len(SITES)
    got = w.lease(W, 100, 60)
    assert len(got) == len(SITES)
    w.ack(W, [(x.fingerprint, x.token) for x in got])
    assert w.finish_run() is not None
    tags = {k.split("{", 1)[1].split("}", 1)[0] for k in r.keys(f"*{old.job}*")}
    assert tags == {old.job, f"{old.job}/p1", f"{old.job}/p2"}  # no other names
    w.reset()
    fresh = opened(3)
    fresh.begin_run()
    assert r.hget(f"{fresh.key}:run", P.FIELD) == "3/slot" and fresh.keys == P.Layout(3).keys(old.job)
    assert not r.keys(f"scale:{{{old.job}/p1}}*")  # the reset removed the old partitions' keys


def test_a_worker_whose_job_was_started_meanwhile_with_the_first_naming_stops(opened, redis_url: str) -> None:
    """A worker of the first partitioned release starts the job between this worker's read
    of the run record and its start (it stores the count alone): this one must not write
    under other names than that worker's."""
    s = opened(3)  # read: no stored count, so the naming by slot
    _raw(redis_url).hset(f"{s.key}:run", P.FIELD, "3")  # the other worker's start
    with pytest.raises(FrontierError) as e:
        s.begin_run()
    msg = str(e.value)
    assert "started with partitions '3'" in msg and "this worker has '3/slot'" in msg and "\n" not in msg, msg
    assert opened(None).keys[1] == f"scale:{{{s.job}/p1}}"  # the next worker takes the stored naming


@pytest.mark.timeout(120)
def test_a_worker_started_with_another_partition_count_stops_with_one_line(
    tmp_path, redis_url: str, redis_prefix: str
) -> None:
    s = open_store(redis_url, redis_prefix, partitions=3)
    try:
        s.begin_run()
    finally:
        s.close()
    settings = {"SCALE_JOB": redis_prefix, "SCALE_FRONTIER_URL": redis_url, "SCALE_FRONTIER_PARTITIONS": 5}
    res = run_crawl(None, settings, tmp_path, start_urls=["http://127.0.0.1:9/"], timeout=90)
    assert res.returncode == 1, res.tail()
    errors = [line for line in res.log.splitlines() if "ERROR" in line]
    assert len(errors) == 1, errors
    assert "Cannot start:" in errors[0] and "SCALE_FRONTIER_PARTITIONS = 3 and this worker has 5" in errors[0]
    assert "Traceback" not in res.log


def test_seeds_written_before_any_worker_started_the_job_are_leased_by_its_workers(opened) -> None:
    """`scrapy scale seed` opens the job before any worker (no run, no stored count): the
    run it opens stores the count, and every partition takes the run, so the seeds are
    in the run the workers then join."""
    cli = opened(None)  # a command: no setting; on one node the default, 1
    assert cli.parts == 1
    cli.reopen_run()  # what `scrapy scale seed` does first
    cli.enqueue_new([req(f"http://{d}/") for d in SITES])
    with pytest.raises(FrontierError, match="started with SCALE_FRONTIER_PARTITIONS = 1"):
        opened(3)
    w = opened(None)
    w.begin_run()
    assert len(w.lease(W, 100, 60)) == len(SITES)


def test_seeds_into_a_partitioned_job_go_to_its_runs_partitions(opened) -> None:
    s = opened(3)
    s.begin_run()
    s.finish_run()  # an empty run ends
    cli = opened(None)
    assert cli.parts == 3
    cli.reopen_run()
    cli.enqueue_new([req(f"http://{d}/") for d in SITES])
    w = opened(3)
    w.begin_run()
    assert w.counts()["pending"] == len(SITES) and len(w.lease(W, 100, 60)) == len(SITES)


def test_a_seed_before_the_first_start_with_a_count_given_stores_it(opened) -> None:
    cli = opened(3)  # e.g. the command run with -s SCALE_FRONTIER_PARTITIONS=3
    cli.reopen_run()
    cli.enqueue_new([req(f"http://{d}/") for d in SITES])
    w = opened(None)
    assert w.parts == 3
    w.begin_run()
    assert len(w.lease(W, 100, 60)) == len(SITES)


class _Sends:
    """The packed sends (round trips) of redis-py's connections in this process, counted
    while ``on``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from redis import connection

        self.n = 0
        owner = next(c for c in connection.Connection.__mro__ if "send_packed_command" in c.__dict__)
        real = owner.send_packed_command  # type: ignore[attr-defined]

        def counted(conn: Any, command: Any, check_health: bool = True) -> Any:
            self.n += 1
            return real(conn, command, check_health)

        monkeypatch.setattr(owner, "send_packed_command", counted)

    def during(self, fn: Any) -> tuple[Any, int]:
        before = self.n
        got = fn()
        return got, self.n - before


def test_a_call_over_several_partitions_is_one_round_trip_to_the_node(opened, monkeypatch) -> None:
    """The partitions' script calls of one store call go in one pipeline: on one node, one
    round trip whatever S (a Cluster: one per node, bench_fleet), with the same answers."""
    s = opened(3)
    s.begin_run()
    s.counts()  # scripts loaded, the run followed
    sends = _Sends(monkeypatch)
    reqs = [req(f"http://{d}/") for d in SITES]
    assert {P.partition_of(r.domain, 3) for r in reqs} == {0, 1, 2}
    got, trips = sends.during(lambda: s.enqueue(reqs))
    assert got == [EnqueueResult.ADDED] * len(SITES) and trips == 1
    counts, trips = sends.during(s.counts)
    assert counts["pending"] == len(SITES) and trips == 1
    leased, trips = sends.during(lambda: s.lease(W, 3, 60))
    # one round of asks, each partition its share (one each; partition 0 has one site)
    assert trips == 1 and sorted(P.partition_of(x.domain, 3) for x in leased) == [0, 1, 2]
    more, trips = sends.during(lambda: s.lease(W, 6, 60))
    # two each asked; partition 0 has none left: what it lacked is asked again
    assert len(more) == 6 and trips == 2
    done = leased + more
    n, trips = sends.during(lambda: s.ack(W, [(x.fingerprint, x.token) for x in done]))
    assert n == 9 and trips == 1
    assert s.counts() == {**counts, "pending": len(SITES) - 9, "done": 9}


def test_a_call_a_pipeline_could_not_run_runs_again_alone(redis_server, redis_prefix, clock) -> None:
    """A node that lost its scripts (a new primary; here SCRIPT FLUSH) refuses the
    pipeline's calls with NOSCRIPT: each runs again alone (loading the script), nothing
    lost or written twice."""
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    s = open_store(url, redis_prefix, clock=clock, partitions=3)
    assert isinstance(s, RedisStore)
    try:
        s.begin_run()
        alone: list[str] = []
        real = s.conn.call_at

        def call_at(part: int, script: str, *args: Any) -> Any:
            alone.append(script)
            return real(part, script, *args)

        s.conn.call_at = call_at  # type: ignore[method-assign]
        redis.Redis(port=redis_server.port).script_flush()
        assert s.enqueue([req(f"http://{d}/") for d in SITES]) == [EnqueueResult.ADDED] * len(SITES)
        assert alone.count("enqueue") == 3  # each partition's call again alone
        alone.clear()
        more = [req(f"http://{d}/more") for d in SITES]
        assert s.enqueue(more) == [EnqueueResult.ADDED] * len(SITES) and not alone  # loaded: one pipeline
        assert len(s.lease(W, 30, 60)) == 2 * len(SITES)
        assert s.counts()["leased"] == 2 * len(SITES) and s.counts()["pending"] == 0
    finally:
        s.close()
