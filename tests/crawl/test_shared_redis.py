"""What a record, a seed or a job name in a shared Redis can do to a worker: nothing but
be crawled or be refused (docs/frontier.md, "What a shared Redis can and cannot do to a
worker"). Real Redis (the shared one, keys under the test's unique prefix)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from scrapy_scale.frontier.backends.redis import RedisStore, glob_escape
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.store import FrontierError, NewRequest
from scrapy_scale.testbed import Testbed
from tests.crawl.test_commands import scale
from tests.support.crawling import run_crawl
from tests.unit.test_shared_redis_refusals import Shop, record

pytestmark = pytest.mark.crawl

# ---- job names (item 11) -------------------------------------------------------------------


def test_a_job_name_with_glob_characters_never_touches_another_job(redis_url: str, redis_prefix: str) -> None:
    other = RedisStore(redis_url, f"{redis_prefix}-books1")
    other.open()
    try:
        other.begin_run()
        other.seed(["http://shop.example/a", "http://shop.example/b"])
        with pytest.raises(FrontierError, match=r"job name .*books\[1\].* is not allowed"):
            bad = RedisStore(redis_url, f"{redis_prefix}-books[1]")
            bad.open()
            bad.begin_run()
            bad.reset()  # before: its SCAN MATCH pattern matched books1's keys and unlinked them
        assert other.counts()["pending"] == 2
    finally:
        other.close()


def test_the_scan_pattern_is_escaped(redis_url: str, redis_prefix: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.set(f"{redis_prefix}:books1:x", 1)
    r.set(f"{redis_prefix}:books*:x", 1)
    assert list(r.scan_iter(match=glob_escape(f"{redis_prefix}:books[1]:") + "*")) == []
    assert list(r.scan_iter(match=glob_escape(f"{redis_prefix}:books*:") + "*")) == [f"{redis_prefix}:books*:x"]
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"


def test_scale_reset_refuses_a_glob_job_name(redis_url: str, redis_prefix: str) -> None:
    other = RedisStore(redis_url, f"{redis_prefix}-books1")
    other.open()
    try:
        other.begin_run()
        other.seed(["http://shop.example/a"])
        p = scale("reset", f"{redis_prefix}-books[1]", settings={"SCALE_FRONTIER_URL": redis_url})
        assert p.returncode == 1, p.stdout + p.stderr
        assert "is not allowed" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert other.counts()["pending"] == 1
    finally:
        other.close()


def test_a_record_naming_another_class_is_refused_without_importing_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert "this" not in sys.modules  # importing it prints the Zen of Python
    for path in ("this.Request", "os.system", "subprocess.Popen", "scrapy_scale.testbed.Testbed"):
        before = set(sys.modules)
        with pytest.raises(codec.CodecError, match="does not allow"):
            codec.decode(record(_class=path), Shop())
        assert set(sys.modules) == before, f"{path}: imported {set(sys.modules) - before}"
    assert "Beautiful is better than ugly" not in capsys.readouterr().out
    # the spider's module is allowed, but only for Request classes
    with pytest.raises(codec.CodecError, match="not a Request class"):
        codec.decode(record(_class=f"{Shop.__module__}.NotARequest"), Shop())  # the spider's module
    with pytest.raises(codec.CodecError, match="not a dotted path"):
        codec.decode(record(_class="Request"), Shop())


@pytest.mark.timeout(180)
def test_a_crawl_dead_letters_hostile_records_and_refuses_hostile_seeds(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    job = redis_prefix
    with Testbed(hosts=1, pages=6, seed=4) as tb:
        base = tb.start_urls[0].rstrip("/")
        host = base.split("//")[1].split(":")[0]
        hostile = {
            "zen": record(url=base + "/item/1", _class="this.Request"),
            "file": record(url="file:///etc/hostname", callback="parse"),
            "private": record(url=base + "/item/2", callback="_stop_testbed"),
            "notreq": record(url=base + "/item/3", _class="example_project.spiders.catalog.Testbed"),
        }
        store = RedisStore(redis_url, job)
        store.open()
        try:
            store.begin_run()
            store.enqueue([NewRequest(fp, data, host, priority=10) for fp, data in hostile.items()])
            store.r.rpush(
                store.feed_key,
                '"file:///etc/hostname"',
                json.dumps({"url": base + "/item/4", "callback": "_stop_testbed"}),
            )
            res = run_crawl(
                tb, {"SCALE_FRONTIER_URL": redis_url, "SCALE_JOB": job, "LOG_LEVEL": "INFO"}, tmp_path, timeout=120
            )
            dead = {d.fingerprint: d.reason for d in store.dead_letters()}
            counts = store.counts()
        finally:
            store.close()
        fetched = {r.path for r in tb.log}
    assert res.returncode == 3, res.tail()  # SCALE_EXIT_CODE_DEAD_LETTERS: the run has dead letters
    assert "4 frontier records could not be read" in res.log
    assert "Beautiful is better than ugly" not in res.log
    assert set(dead) == set(hostile), dead
    assert "does not allow" in dead["zen"] and "not imported" in dead["zen"]
    assert "scheme 'file' is not allowed" in dead["file"]
    assert "'_stop_testbed' is not a public method" in dead["private"]
    assert "not a Request class" in dead["notreq"]
    assert res.stats.get("scale/frontier/feed_refused") == 2, res.stats
    assert res.stats.get("scale/frontier/dead_lettered") == 4
    assert "hostname" not in json.dumps(res.items)
    assert counts["done"] == len(tb.detail_urls()) + 1 and counts["pending"] == counts["leased"] == 0, counts
    assert "/item/1" in fetched  # the catalog's own request for it ran as usual
