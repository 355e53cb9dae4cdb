"""Issue 35: hostile values in the frontier's own shared state, read by `scrapy scale status`
and by the workers (their status and counts reads).

The status counts, the run documents, the records' eligible times, the delayed set and (on
SQLite) the runs, jobs, counts and requests tables are written into the real Redis keys and
the real SQLite file the way another program (or a person with the password) could write
them: not UTF-8, JSON nested 100,000 deep, not JSON, numbers that are not finite or far in the
future, values of the wrong type. Each read skips or clamps them with ONE warning per kind
(three reads, one warning), and `scrapy scale status` prints its status, text and JSON.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request

from scrapy_scale.frontier import codec
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.store import FrontierStore
from tests.crawl.test_commands import scale
from tests.support.said import Said, listening

pytestmark = pytest.mark.crawl

#: JSON nested 100,000 deep: json.loads raises RecursionError
DEEP = "[" * 100_000 + "]" * 100_000
W = "host/0"


@pytest.fixture
def said() -> Iterator[Said]:
    with listening("scrapy_scale.frontier") as h:
        yield h


def _fill(store: FrontierStore) -> None:
    """A run with 3 pending records on 2 sites, one leased, one failed."""
    store.begin_run()
    store.enqueue([codec.new_request(Request(f"http://{h}.test/{i}")) for h in ("a", "b") for i in range(3)])
    leased = store.lease(W, 2, 60.0)
    store.fail(W, [(leased[0].fingerprint, leased[0].token, "blocked", "403")])


def _read_three_times(store: FrontierStore) -> list[Any]:
    return [(store.status(), store.counts(), store.runs()) for _ in range(3)]


def _status_cli(job: str, settings: dict[str, str]) -> dict[str, Any]:
    """`scrapy scale status JOB` in text and JSON: both exit 0 with no traceback."""
    text = scale("status", job, settings=settings)
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    p = scale("status", job, "--json", settings=settings)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return dict(json.loads(p.stdout, parse_constant=_not_json))  # strict JSON: no NaN, no Infinity


def _not_json(name: str) -> None:
    raise AssertionError(f"{name} in the status JSON")


# ---- Redis -----------------------------------------------------------------------------


REDIS_CASES = {
    # the status counts hash: a count that is no number, not finite, far too large, not UTF-8
    "counts": "counts of job",
    # the current run's document in the runs hash
    "run-deep": "run document",
    "run-not-utf8": "run document",
    "run-not-json": "run document",
    "run-wrong-types": "run document",
    # a pending record's eligible time: not finite (the status script failed to encode it)
    "record-inf": "eligible time",
    # the delayed set's latest eligible time: +inf
    "delayed-inf": "eligible time",
}


@pytest.mark.parametrize("hostile", sorted(REDIS_CASES))
def test_hostile_frontier_state_in_redis_is_skipped_with_one_warning(
    redis_url: str, redis_prefix: str, said: Said, hostile: str
) -> None:
    store = open_store(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    try:
        _fill(store)
        k = f"scale:{{{redis_prefix}}}"
        rid = r.hget(f"{k}:run", "id").decode()
        p = f"{k}:{rid}"
        if hostile == "counts":
            r.hset(f"{p}:cnt", mapping={"done": "lots", "fail:blocked": "1e300", "wait_n": "nan", b"\xff\xfe": b"1"})
            r.hset(f"{p}:cnt", "fail:\xff", b"\xff")
        elif hostile.startswith("run-"):
            doc = {
                "run-deep": DEEP,
                "run-not-utf8": b'{"run_id": 1, "started_at": \xff}',
                "run-not-json": "not json",
                "run-wrong-types": json.dumps({"run_id": "x", "started_at": "inf", "counts": [1]}),
            }[hostile]
            r.hset(f"{k}:runs", rid, doc)
            r.hset(f"{k}:runs", "99", json.dumps({"run_id": 99, "started_at": 1e300, "counts": {"done": "x"}}))
        elif hostile == "record-inf":
            for key in r.scan_iter(match=f"{p}:r:*"):
                if r.hget(key, "st") == b"0":
                    r.hset(key, "el", "inf")
                    break
        else:
            r.zadd(f"{p}:delayed", {"ghost": float("inf")})
        reads = _read_three_times(store)
        st = _status_cli(redis_prefix, {"SCALE_FRONTIER_URL": redis_url})
    finally:
        store.close()
        r.close()
    status, counts, _ = reads[-1]
    assert all(isinstance(v, int) and v >= 0 for v in counts.values()), counts
    assert status.counts["pending"] >= 1
    if hostile == "counts":
        assert counts["done"] == 0 and status.failed_by_class == {}, (counts, status.failed_by_class)
        assert status.average_wait is None
    if hostile.startswith("run-"):
        assert status.run is None and [x.run_id for x in reads[-1][2]] == [], reads[-1][2]
    if hostile == "record-inf":
        assert status.oldest_pending_age is not None and status.oldest_pending_age < 3600
    if hostile == "delayed-inf":
        assert status.last_eligible_at is None and st["last_eligible_at"] is None
    warned = [line for line in said.lines if REDIS_CASES[hostile] in line]
    assert len(warned) == 1, said.lines  # three reads (and two commands): one warning


# ---- SQLite ----------------------------------------------------------------------------


SQLITE_CASES = {
    # the job's wait sums: text where numbers belong (the counts table is checked against
    # the records when the file is opened: a count of text is reported as corruption there)
    "counts": "counts of job",
    # the current run's row: its counts JSON nested 100,000 deep, its start time text
    "run-deep": "run document",
    "run-wrong-types": "run document",
    # the pending records' eligible times: text (MIN() returned it; `now - text` raised)
    "record-text": "eligible time",
    # a delayed record eligible at +inf
    "delayed-inf": "eligible time",
}


@pytest.mark.parametrize("hostile", sorted(SQLITE_CASES))
def test_hostile_frontier_state_in_sqlite_is_skipped_with_one_warning(tmp_path: Path, said: Said, hostile: str) -> None:
    job = f"job-{hostile}-{uuid.uuid4().hex[:8]}"  # warnings are once per job and kind in a process: its own
    url = f"sqlite:///{tmp_path / 'frontier.db'}"
    store = open_store(url, job)
    try:
        _fill(store)
        db = sqlite3.connect(tmp_path / "frontier.db", isolation_level=None)
        if hostile == "counts":
            db.execute("UPDATE jobs SET wait_sum='x', wait_n='y' WHERE job=?", (job,))
        elif hostile == "run-deep":
            db.execute("UPDATE runs SET counts=? WHERE job=?", (DEEP, job))
        elif hostile == "run-wrong-types":
            db.execute("UPDATE runs SET started_at='abc', counts='[1]' WHERE job=?", (job,))
        elif hostile == "record-text":
            db.execute("UPDATE requests SET eligible_at='soon' WHERE job=? AND state=0", (job,))
        else:
            db.execute(
                "UPDATE requests SET state=1, eligible_at=9e999 WHERE job=? AND id=(SELECT MIN(id) FROM requests "
                "WHERE job=? AND state=0)",
                (job, job),
            )
        db.close()
        reads = _read_three_times(store)
        st = _status_cli(job, {"SCALE_FRONTIER_URL": url})
    finally:
        store.close()
    status, counts, _ = reads[-1]
    assert all(isinstance(v, int) and v >= 0 for v in counts.values()), counts
    if hostile == "counts":
        assert counts["failed"] == 1 and status.average_wait is None, (counts, status.average_wait)
    if hostile.startswith("run-"):
        assert status.run is None and reads[-1][2] == [], reads[-1][2]
    if hostile == "record-text":
        assert status.oldest_pending_age is None
    if hostile == "delayed-inf":
        assert status.last_eligible_at is None and st["last_eligible_at"] is None
    warned = [line for line in said.lines if SQLITE_CASES[hostile] in line]
    assert len(warned) == 1, said.lines  # three reads (and two commands): one warning


def test_a_hostile_run_marker_in_redis_is_clamped_or_stops_the_worker_cleanly(
    redis_url: str, redis_prefix: str, said: Said
) -> None:
    """The run marker (scale:{JOB}:run: id, started, ended) read back by a worker joining
    the run: a start time of text raised ValueError in begin_run (a traceback at every
    worker's start); now it is taken as now, with one warning. An id that is no run number
    names no run a worker can join: the worker stops with one clear error (FrontierFatal),
    and `status` still prints."""
    from scrapy_scale.frontier.store import FrontierFatal

    store = open_store(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    k = f"scale:{{{redis_prefix}}}"
    try:
        first = store.begin_run()
        r.hset(f"{k}:run", "started", "soon")
        joined = [open_store(redis_url, redis_prefix) for _ in range(3)]
        infos = [s.begin_run() for s in joined]
        for s in joined:
            s.close()
        r.hset(f"{k}:run", "id", "abc")
        late = open_store(redis_url, redis_prefix)
        with pytest.raises(FrontierFatal, match="run marker"):
            late.begin_run()
        _status_cli(redis_prefix, {"SCALE_FRONTIER_URL": redis_url})
        late.reset()  # what the error says to do: the job starts over
        again = late.begin_run()
        late.close()
    finally:
        store.close()
        r.close()
    assert [(i.run_id, i.resumed) for i in infos] == [(first.run_id, True)] * 3
    assert all(i.started_at >= first.started_at for i in infos)  # taken as now
    assert again.run_id > first.run_id and not again.resumed
    warned = [line for line in said.lines if "run document" in line]
    assert len(warned) == 1, said.lines


def test_eligible_times_that_are_not_finite_do_not_fail_the_lease(redis_url: str, redis_prefix: str) -> None:
    """A ready record's eligible time of "-inf" made the lease script's wait sum infinite,
    and Redis refused the HINCRBYFLOAT: every lease call of every worker failed, for ever.
    "-1e308" twice did the same (their sum overflows). Now a time that is not finite is an
    unreadable record (dead-lettered alone, as other corrupt fields are), and a wait is
    counted as at most MAX_WAIT: the other records are leased and the average wait stays
    finite."""
    store = open_store(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    try:
        store.begin_run()
        store.enqueue([codec.new_request(Request(f"http://a.test/{i}")) for i in range(6)])
        p = f"scale:{{{redis_prefix}}}:{r.hget(f'scale:{{{redis_prefix}}}:run', 'id').decode()}"
        keys = sorted(r.scan_iter(match=f"{p}:r:*"))
        for key, el in zip(keys, ["-inf", "nan", "-1e308", "-1e308"], strict=False):
            r.hset(key, "el", el)
        got = store.lease(W, 10, 60.0)
        status = store.status()
    finally:
        store.close()
        r.close()
    leased = [x for x in got if x.error is None]
    dead = [x for x in got if x.error is not None]
    assert len(leased) == 4 and len(dead) == 2, got
    assert all("is not a finite number" in x.error for x in dead), dead  # type: ignore[operator]
    assert status.average_wait is not None and status.average_wait < 1e10


def test_heartbeats_not_utf8_written_during_the_run_are_skipped(redis_url: str, redis_prefix: str, said: Said) -> None:
    """The heartbeats hash is read by every worker's sync (its fair share of the job): a
    field or value that is not UTF-8, written while the run goes on (a new run deletes the
    hash), raised UnicodeDecodeError out of RedisStore.beats at every sync. Now it is
    skipped with one warning, and the workers' own heartbeats are read."""
    store = open_store(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    try:
        store.begin_run()
        store.heartbeat(W, store.clock() + 30)
        r.hset(f"scale:{{{redis_prefix}}}:alive", mapping={b"\xff\xfe": b"1 2", "ghost/1": b"\xff"})
        reads = [store.beats() for _ in range(3)]
    finally:
        store.close()
        r.close()
    assert sorted(reads[-1]) == [W] and len(reads[-1][W]) == 2, reads[-1]
    warned = [line for line in said.lines if "unreadable field(s)" in line]
    assert len(warned) == 1 and "2 unreadable" in warned[0], said.lines


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_an_unreadable_record_is_not_shown_by_get(
    tmp_path: Path, redis_url: str, redis_prefix: str, said: Said, backend: str
) -> None:
    """`scrapy scale replay` asks the frontier for the state of each replayed request
    (store.get): a record with a state no frontier writes raised KeyError (SQLite) or
    IndexError (Redis), a count of text ValueError, a field not UTF-8 UnicodeDecodeError.
    Now get() returns None for it (no record: its snapshot is kept), with one warning."""
    url = redis_url if backend == "redis" else f"sqlite:///{tmp_path / 'frontier.db'}"
    job = redis_prefix if backend == "redis" else f"job-get-{redis_prefix}"
    store = open_store(url, job)
    try:
        _fill(store)
        fps = [codec.default_fingerprint(Request(f"http://b.test/{i}")) for i in range(3)]
        if backend == "redis":
            r = redis.Redis.from_url(redis_url)
            p = f"scale:{{{job}}}:{r.hget(f'scale:{{{job}}}:run', 'id').decode()}"
            r.hset(f"{p}:r:{fps[0]}", "st", "9")
            r.hset(f"{p}:r:{fps[1]}", "a", "many")
            r.hset(f"{p}:r:{fps[2]}", "dom", b"\xff")
            r.close()
        else:
            db = sqlite3.connect(tmp_path / "frontier.db", isolation_level=None)
            db.execute("PRAGMA ignore_check_constraints = 1")
            for fp in fps:
                db.execute("UPDATE requests SET state=9 WHERE job=? AND fp=?", (job, fp))
            db.close()
        got = [[store.get(fp) for fp in fps] for _ in range(3)]
        good = store.get(codec.default_fingerprint(Request("http://a.test/2")))
    finally:
        store.close()
    assert got[-1] == [None, None, None] and good is not None and good["state"] == "pending"
    warned = [line for line in said.lines if "unreadable record" in line]
    assert len(warned) == 1, said.lines


def test_a_current_run_of_text_in_sqlite_stops_the_worker_and_keeps_the_records(tmp_path: Path, said: Said) -> None:
    """SQLite's jobs.current_run of text named no run row, so begin_run took the job as
    having no run, wiped its records and began run 1 again: every pending request lost.
    Now the worker stops with one clear error, and the records stay; `status` prints (no
    run, one warning) and `reset` still starts the job over."""
    from scrapy_scale.frontier.store import FrontierFatal

    url = f"sqlite:///{tmp_path / 'frontier.db'}"
    job = f"job-{uuid.uuid4().hex[:8]}"  # warnings are once per job and kind in a process: its own
    store = open_store(url, job)
    try:
        _fill(store)
    finally:
        store.close()
    db = sqlite3.connect(tmp_path / "frontier.db", isolation_level=None)
    db.execute("UPDATE jobs SET current_run='abc' WHERE job=?", (job,))
    db.close()
    late = open_store(url, job)
    try:
        with pytest.raises(FrontierFatal, match="run marker"):
            late.begin_run()
        counts = late.counts()
        st = _status_cli(job, {"SCALE_FRONTIER_URL": url})
        late.reset()
        again = late.begin_run()
    finally:
        late.close()
    assert counts["pending"] == 4 and counts["leased"] == 1 and counts["failed"] == 1, counts
    assert st["run"] is None and again.run_id >= 1 and not again.resumed
    assert len([line for line in said.lines if "run document" in line]) == 1, said.lines


def test_a_run_sequence_that_is_no_number_lets_the_next_run_begin_after_the_highest(
    redis_url: str, redis_prefix: str, said: Said
) -> None:
    """The job's run sequence (scale:{JOB}:meta runseq) set to text by another program: the
    run script's HINCRBY failed on it, so no run of the job could begin again (every
    worker's start raised). Now the next run follows the highest run recorded, with one
    warning; later runs count on from there."""
    store = open_store(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    k = f"scale:{{{redis_prefix}}}"
    try:
        first = store.begin_run().run_id
        store.reset()
        second = store.begin_run().run_id
        r.hset(f"{k}:meta", "runseq", "lots")
        store.reset()
        third = store.begin_run().run_id
        store.reset()
        fourth = store.begin_run().run_id
    finally:
        store.close()
        r.close()
    assert (second, third, fourth) == (first + 1, first + 2, first + 3)
    warned = [line for line in said.lines if "run sequence" in line]
    assert len(warned) == 1, said.lines


def test_a_run_marker_not_utf8_stops_the_worker_cleanly_and_status_prints(
    redis_url: str, redis_prefix: str, said: Said
) -> None:
    """A run marker id that is not UTF-8: the run script's reply and every read of the run's
    keys raised UnicodeDecodeError (a traceback in every worker and in `status`). A worker
    now stops with the marker's clear error, and `status` prints."""
    from scrapy_scale.frontier.store import FrontierFatal

    store = open_store(redis_url, redis_prefix)
    r = redis.Redis.from_url(redis_url)
    k = f"scale:{{{redis_prefix}}}"
    try:
        _fill(store)
        r.hset(f"{k}:run", "id", b"\xff\xfe")
        late = open_store(redis_url, redis_prefix)
        with pytest.raises(FrontierFatal, match="run marker"):
            late.begin_run()
        late.close()
        _status_cli(redis_prefix, {"SCALE_FRONTIER_URL": redis_url})
    finally:
        store.close()
        r.close()


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_a_workers_table_entry_of_another_program_is_no_slot_and_claims_go_on(
    backend: str, redis_url: str, redis_prefix: str, tmp_path: Path, said: Said
) -> None:
    """The workers table is read whole by the shared claim (``read_workers``): a worker name
    that is not UTF-8 (Redis) or not text (a SQLite BLOB), beside a pid that is no pid, is
    nobody's slot; the claim takes slot 0, then 1, with the pid's one warning."""
    url = redis_url if backend == "redis" else f"sqlite:///{tmp_path / 'f.db'}"
    h = f"h-{backend}"  # the pid's warning is given once per worker id and process
    store = open_store(url, redis_prefix)
    try:
        if backend == "redis":
            r = redis.Redis.from_url(redis_url)
            r.hset(
                f"scale:{{{redis_prefix}}}:workers", mapping={f"{h}/0".encode() + b"\xff": b"1", f"{h}/1": b"notapid"}
            )
            r.close()
        else:
            store.db.execute(  # type: ignore[attr-defined]
                "INSERT INTO workers (job, worker, pid, at) VALUES (?, ?, 1, 0), (?, ?, 'notapid', 0)",
                (redis_prefix, f"{h}/0".encode(), redis_prefix, f"{h}/1"),
            )
        first = store.claim_worker(h, 4242, lambda pid: True)
        second = store.claim_worker(h, 4343, lambda pid: True)
    finally:
        store.close()
    assert (first, second) == (f"{h}/0", f"{h}/1")
    assert sum("is not a pid; its slot is taken as free" in line for line in said.lines) == 1, said.lines
