"""The fast seeding path (scrapy_scale/frontier/records/seeding.py, ``enqueue_new``, the feed's
plain URLs) stores exactly what the request path stored: same fingerprints, same data,
same records, counts, queue order and errors, on tricky URLs, duplicates and bad lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from scrapy import Request, Spider
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler
from w3lib.url import canonicalize_url, safe_url_string

from scrapy_scale.clock import FakeClock
from scrapy_scale.frontier.backends import open_store
from scrapy_scale.frontier.ops.cli_ops import JobOps, OpError
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.records.seeding import UrlSeeds
from scrapy_scale.frontier.store import FrontierStore
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl

ROOT = Path(__file__).resolve().parents[2]

GOOD = [
    "http://a.test/1",
    "http://a.test/2",
    "https://b.test/x?b=2&a=1",
    "HTTP://A.TEST/Path?b=2&a=1#frag",
    "https://user:pw@Host.test:8080/x?y",
    "http://c.test",
    "http://c.test?x",
    "http://c.test#x",
    "http://c.test:/x",
    "http://c.test:80/x",
    "http://a.test/\u00e4?q=\u00fc",
    "http://\u00e4.test/",
    "http://a.test/a b",
    "http://a.test/%7e/%2F/%41",
    "http://[::1]:80/x",
    "http://a.test/../b/./c",
    "https://a.test/p;params?x=1",
    "http://xn--nxasmq6b.test/",
    "http://a.test/tab\there",
    "http://\u212a.test/",  # KELVIN SIGN: case-folds to k
    "http://a.test/1",  # a duplicate within the batch
    "http://a.test/2?",
    "http://a.test:99999/",
    "https://b.test/x?a=1&b=2",  # the same fingerprint as an earlier one (sorted query)
    " http://a.test/lead",
    "http://a.test/x\n",
    "http:\\\\a.test\\back",
    "http://a.test/" + "x" * 3000,
]
BAD = ["ftp://a.test/", "file:///etc/hostname", "not-a-url", "http://", "http:///x", "mailto:x@y"]
BAD += ["//a.test/x", "htt\u017fp://a.test/", "http\u017f://a.test/", "data:,x", "about:blank", ""]


def old_valid(u: str, schemes: frozenset[str]) -> bool:
    """What cli_ops checked before (the command's argument check)."""
    return not (urlsplit(u).scheme.lower() not in schemes or not urlsplit(u).netloc)


def outcome(fn: Any, *args: Any, **kw: Any) -> Any:
    try:
        return fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 - the same failure either way
        return (type(e), str(e))


@pytest.mark.parametrize("schemes", [("http", "https"), ("https",), ("http", "https", "s3")])
@pytest.mark.parametrize("priority", [0, 5, None])
def test_records_are_the_codecs(schemes: tuple[str, ...], priority: int | None) -> None:
    rules = codec.RecordRules(schemes=frozenset(schemes))
    seeds = UrlSeeds(rules, priority)
    for u in GOOD + BAD + ["s3://bucket/key", "HTTPS://X.TEST/", "http://[::1/"]:
        assert outcome(seeds.valid, u) == outcome(old_valid, u, rules.schemes), u
        assert outcome(seeds.record, u) == outcome(codec.new_request, u, priority=priority, rules=rules), u


class SameFingerprints(RequestFingerprinter):
    """Scrapy's fingerprints under another class: the scheduler cannot know they are the same."""


class FeedSpider(Spider):
    name = "seedfeed"

    def parse(self, response: Any) -> Any:  # pragma: no cover - never called
        yield from ()


def test_feed_messages_give_the_requests_records() -> None:
    spider = FeedSpider()
    rules = codec.RecordRules.for_crawl(spider)
    seeds = UrlSeeds(rules)
    fper = get_crawler(FeedSpider).request_fingerprinter
    msgs: list[Any] = [json.dumps(u) for u in GOOD + BAD]
    msgs += [json.dumps(u, ensure_ascii=False) for u in GOOD[-10:]] + [
        '"http://a.test/" junk',
        '"',
        "x",
        "",
        b'"http://a.test/b"',
    ]
    msgs += [json.dumps({"url": "http://a.test/1"}), "[1]", "7"]

    def old(msg: Any) -> Any:
        r = codec.request_from_feed(msg, spider, rules)
        return codec.new_request(r, fingerprint=fper.fingerprint(r).hex(), spider=spider, rules=rules)

    fast = 0
    for m in msgs:
        nr = seeds.from_feed(m)
        if nr is not None:
            fast += 1
            assert nr == old(m), m
    assert fast >= len(GOOD) - 8  # the shortcut is the common case


def _dump(store: FrontierStore) -> dict[str, Any]:
    """Everything a seed changes: counts, status, each record, the lease order, and on
    Redis the raw hashes of the records."""
    fps = [codec.default_fingerprint(Request(u)) for u in GOOD if not isinstance(outcome(Request, u), tuple)]
    out: dict[str, Any] = {"counts": store.counts(), "records": {fp: store.get(fp) for fp in fps}}
    st = store.status()
    out["status"] = (st.counts, st.run.run_id if st.run else None, st.run.ended_at if st.run else None)
    if hasattr(store, "r"):
        prefix = store.run_prefix()  # type: ignore[attr-defined]
        out["raw"] = {fp: store.r.hgetall(f"{prefix}:r:{fp}") for fp in fps}  # type: ignore[attr-defined]
        out["queues"] = sorted(k[len(prefix) :] for k in store.r.scan_iter(match=f"{prefix}:*"))  # type: ignore[attr-defined]
    out["leased"] = [(lz.fingerprint, lz.data, lz.domain, lz.priority) for lz in store.lease("w", 1000, 60)]
    return out


@pytest.fixture(params=["sqlite", "redis"])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    clock = FakeClock()
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        jobs = [f"{prefix}-old", f"{prefix}-new"]
    else:
        url, jobs = f"sqlite:///{tmp_path / 'f.db'}", ["old", "new"]
    stores = [open_store(url, j, clock=clock) for j in jobs]
    yield stores
    for s in stores:
        s.close()


def test_seed_writes_what_the_request_path_wrote(two_stores: list[FrontierStore], tmp_path: Path) -> None:
    old, new = two_stores
    for s in (old, new):  # a finished run with one record already known: reopened, deduplicated
        s.begin_run()
        s.enqueue([codec.new_request("http://a.test/2")])
        got = s.lease("w", 5, 60)
        s.ack("w", [(x.fingerprint, x.token) for x in got])
        assert s.finish_run() is not None
    # those the old argument check lets through and new_request takes (both refuse the others)
    urls = [u for u in GOOD if old_valid(u, frozenset({"http", "https"})) is True]
    urls = [u for u in urls if not isinstance(outcome(codec.new_request, u), tuple)]
    assert len(urls) >= len(GOOD) - 4
    res = old.seed(urls, priority=3)
    added_old = sum(1 for r in res if r.value == "added")
    ops = JobOps(new, "here")
    assert ops.seed(urls, priority=3) == added_old
    assert _dump(new) == _dump(old)

    # a file: the same records and count; a bad line enqueues nothing
    f = tmp_path / "seeds.txt"
    f.write_text("\n".join(["http://d.test/1", "", "  http://d.test/2  ", "http://d.test/1", *urls]) + "\n")
    old.seed(["http://d.test/1", "http://d.test/2", "http://d.test/1", *[u.strip() for u in urls]], priority=1)
    assert ops.seed_file(str(f), priority=1) == (2, len(urls) + 3)
    assert _dump(new) == _dump(old)
    f.write_text("http://e.test/1\nftp://e.test/\nhttp://e.test/2\n")
    before = new.counts()
    with pytest.raises(OpError, match=r"line 2: 'ftp://e.test/'; nothing was enqueued"):
        ops.seed_file(str(f))
    with pytest.raises(OpError, match="not an absolute http\\(s\\) URL: not-a-url"):
        ops.seed(["http://e.test/3", "not-a-url"])
    assert new.counts() == before


def test_feed_enqueues_what_the_request_path_enqueued(redis_url: str, redis_prefix: str) -> None:
    from scrapy_scale.frontier.scheduling.scheduler import Scheduler

    msgs = [json.dumps(u) for u in GOOD + BAD] + [json.dumps({"url": "http://f.test/", "priority": 4}), "not json"]
    msgs += [json.dumps(u) for u in GOOD[:3]] + [json.dumps({"url": "http://a.test/1", "dont_filter": True})]
    dumps, stats, bulk = [], [], []
    for fast in (False, True):
        job = f"{redis_prefix}-{fast}"
        settings = {"SCALE_FRONTIER_URL": redis_url, "SCALE_JOB": job}
        if not fast:  # the request path for every message: the seed fast path is only taken
            # with Scrapy's own fingerprinter class (another may give other fingerprints)
            settings["REQUEST_FINGERPRINTER_CLASS"] = SameFingerprints
        crawler = get_crawler(FeedSpider, settings)
        sched = Scheduler.from_crawler(crawler)
        crawler.stats.open_spider()  # type: ignore[call-arg]
        sched.attach(FeedSpider())
        calls: list[int] = []
        bulk.append(calls)
        enqueue_new = sched.store.enqueue_new
        sched.store.enqueue_new = lambda run, _f=enqueue_new, _c=calls: _c.append(len(run)) or _f(run)  # type: ignore[method-assign]
        try:
            sched.store.r.rpush(sched.store.feed_key, *msgs)  # type: ignore[union-attr]
            while sched.store.r.llen(sched.store.feed_key):  # type: ignore[union-attr]
                sched.sync_blocking()
            d = _dump(sched.store)
            for rec in d["records"].values():  # the wall clock: times differ between the two jobs
                if rec:
                    rec.pop("enqueued_at"), rec.pop("eligible_at"), rec.pop("lease_expires", None)
            for raw in d["raw"].values():
                raw.pop("enq", None), raw.pop("el", None), raw.pop("le", None)
            d["leased"] = sorted(d["leased"])
            dumps.append(d)
            stats.append({k: v for k, v in crawler.stats.get_stats().items() if "feed" in k or "dedup" in k})
        finally:
            sched.store.close()
    assert not bulk[0] and sum(bulk[1]) > 0  # each path ran: seeds went through enqueue_new only when fast
    assert dumps[1] == dumps[0]
    assert (
        stats[1] == stats[0] and stats[0]["scale/frontier/feed_refused"] == 12
    )  # BAD but http:// and http:///x, the port, "not json"


def _feed_scheduler(redis_url: str, job: str) -> Any:
    from scrapy_scale.frontier.scheduling.scheduler import Scheduler

    crawler = get_crawler(FeedSpider, {"SCALE_FRONTIER_URL": redis_url, "SCALE_JOB": job})
    sched = Scheduler.from_crawler(crawler)
    crawler.stats.open_spider()  # type: ignore[call-arg]
    sched.attach(FeedSpider())
    return sched


FEED_MSGS = [json.dumps(f"http://a.test/{i}") for i in range(6)] + [
    json.dumps({"url": "http://b.test/x", "priority": 3}),
    json.dumps("http://a.test/1"),  # a duplicate
    json.dumps("http://c.test/"),
]


def test_a_written_feed_pull_leaves_nothing_taken(redis_url: str, redis_prefix: str) -> None:
    sched = _feed_scheduler(redis_url, redis_prefix)
    try:
        r, feed = sched.store.r, sched.store.feed_key
        r.rpush(feed, *FEED_MSGS)
        sched.sync_blocking()
        assert not r.llen(feed) and not r.exists(sched.store.taken_key(sched.worker), f"{feed}:takers")
        assert sched.store.counts()["pending"] + sched.store.counts()["leased"] == 8
    finally:
        sched.store.close()


def test_a_feed_pull_whose_write_failed_is_written_by_the_next_one(redis_url: str, redis_prefix: str) -> None:
    import redis

    sched = _feed_scheduler(redis_url, redis_prefix)
    store = sched.store
    try:
        r, feed, taken = store.r, store.feed_key, store.taken_key(sched.worker)
        r.rpush(feed, *FEED_MSGS, *(json.dumps(f"http://d.test/{i}") for i in range(3)))
        real, calls = store.enqueue_new, []

        def enqueue_new(run: Any) -> int:  # the first call writes half of its seeds, then fails
            calls.append(len(run))
            if len(calls) == 1:
                real(run[: len(run) // 2])
                raise redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'")
            return int(real(run))

        store.enqueue_new = enqueue_new
        with pytest.raises(redis.ResponseError, match="OOM"):
            sched.sync_blocking()
        more = [json.dumps(f"http://d.test/{i}") for i in range(3)]
        assert not r.llen(feed) and r.lrange(taken, 0, -1) == FEED_MSGS + more  # kept, in order
        r.rpush(feed, json.dumps("http://e.test/"))  # a new message waits: the taken ones come first
        sched.sync_blocking()
        assert not r.exists(taken) and r.lrange(feed, 0, -1) == [json.dumps("http://e.test/")]
        sched.sync_blocking()
        assert not r.llen(feed) and not r.exists(taken)
        c = store.counts()
        assert c["pending"] + c["leased"] == 12  # 8 distinct, d.test x3, e.test: nothing lost, none twice
        urls = [f"http://a.test/{i}" for i in range(6)] + ["http://b.test/x", "http://c.test/"]
        urls += [f"http://d.test/{i}" for i in range(3)] + ["http://e.test/"]
        assert all(store.get(codec.default_fingerprint(Request(u))) for u in urls)
        assert calls[0] == 6 and len(calls) == 4  # failed, then the taken ones again (two runs), then e.test
    finally:
        sched.store.close()


def test_seed_file_from_the_command(tmp_path: Path) -> None:
    state = tmp_path / "state"
    f = tmp_path / "urls.txt"

    def scale(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "scrapy", "scale", "seed", "filed", *args, "-s", f"SCALE_STATE_DIR={state}"]
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=hang_guard(60))

    f.write_text("http://a.test/1\nnot a url\n\nhttp://a.test/2\n")
    p = scale("--file", str(f))
    assert p.returncode == 1 and "line 2: 'not a url'; nothing was enqueued" in p.stderr, p.stderr
    f.write_text("http://a.test/1\n\nhttp://a.test/2\nhttp://a.test/1\n")
    p = scale("http://a.test/3", "--file", str(f))
    assert p.returncode == 0 and "filed: 3 of 4 URL(s) enqueued (1 already known)" in p.stdout, p.stderr
    p = scale("--file", str(tmp_path / "missing.txt"))
    assert p.returncode == 1 and "cannot read" in p.stderr and "Traceback" not in p.stderr, p.stderr
    with open_store(f"sqlite:///{state}/frontier.db", "filed") as store:
        assert store.counts()["pending"] == 3


def _random_urls(n: int, seed: int) -> list[str]:
    import random

    rnd = random.Random(seed)
    host_chars = "abcxyz019-.AZ_~\u00e4"
    path_chars = "abcAZ019-._~/%;=&+:@!$'()*,?#[] \u00e4\t"
    out = []
    for _ in range(n):
        scheme = rnd.choice(["http", "https", "https", "HTTP", "ftp"])
        labels = ["".join(rnd.choice(host_chars) for _ in range(rnd.randint(0, 6))) for _ in range(rnd.randint(1, 3))]
        if rnd.random() < 0.6:  # mostly plain hosts, which the shortcut takes
            labels = ["".join(rnd.choice("abz09-") for _ in range(rnd.randint(1, 6))) for _ in range(rnd.randint(1, 3))]
            labels[-1] = rnd.choice("abz") + labels[-1]
        host = ".".join(labels)
        port = rnd.choice(["", "", "", ":80", ":8080", ":"])
        pchars = path_chars if rnd.random() < 0.5 else "abcAZ019-._~/"
        path = "".join(rnd.choice(pchars) for _ in range(rnd.randint(0, 14)))
        out.append(f"{scheme}://{host}{port}/{path}" if rnd.random() < 0.9 else f"{scheme}://{host}{port}")
    return out


def test_random_urls_give_the_codecs_records() -> None:
    rules = codec.RecordRules()
    seeds = UrlSeeds(rules, 2)
    assert seeds.shortcut_on, "the shortcut for URLs w3lib leaves as they are is on with this w3lib"
    shortcut = 0
    for u in _random_urls(10_000, 11):
        if seeds.canonical(u):
            shortcut += 1
            assert safe_url_string(u, "utf-8") == u == canonicalize_url(u), u
        assert outcome(seeds.valid, u) == outcome(old_valid, u, rules.schemes), u
        assert outcome(seeds.record, u) == outcome(codec.new_request, u, priority=2, rules=rules), u
    assert shortcut > 400  # the shortcut was tried on many
