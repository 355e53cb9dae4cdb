"""What a record, a seed or a job name in a shared Redis can do to a worker: nothing but
be crawled or be refused (docs/frontier.md, "What a shared Redis can and cannot do to a
worker"). Real Redis (the shared one, keys under the test's unique prefix)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import scrapy
from scrapy.http import FormRequest, JsonRequest

from scrapy_scale import config
from scrapy_scale.frontier import codec
from scrapy_scale.frontier.backends.redis import RedisStore, glob_escape
from scrapy_scale.frontier.store import FrontierError, NewRequest
from scrapy_scale.testbed import Testbed
from tests.crawl.test_commands import scale
from tests.support.crawling import run_crawl

# ---- job names (item 11) -------------------------------------------------------------------


@pytest.mark.crawl
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


@pytest.mark.crawl
def test_the_scan_pattern_is_escaped(redis_url: str, redis_prefix: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.set(f"{redis_prefix}:books1:x", 1)
    r.set(f"{redis_prefix}:books*:x", 1)
    assert list(r.scan_iter(match=glob_escape(f"{redis_prefix}:books[1]:") + "*")) == []
    assert list(r.scan_iter(match=glob_escape(f"{redis_prefix}:books*:") + "*")) == [f"{redis_prefix}:books*:x"]
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"


@pytest.mark.pure
@pytest.mark.parametrize("name", ["books[1]", "a*", "a b", "x:y", "{j}", "", ".hidden", "-x", "é", "j" * 101])
def test_scale_job_is_checked_at_startup(name: str) -> None:
    with pytest.raises(config.ScaleSettingError) as e:
        config.get({"SCALE_JOB": name}, "SCALE_JOB")
    assert e.value.setting == "SCALE_JOB"
    if name:
        assert "letters, digits" in str(e.value)


@pytest.mark.pure
@pytest.mark.parametrize("name", ["books1", "catalog", "shop.example-2026_11", "J" * 100])
def test_ordinary_job_names_are_accepted(name: str) -> None:
    assert config.get({"SCALE_JOB": name}, "SCALE_JOB") == name


@pytest.mark.crawl
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


# ---- what a record may name (items 8, 9, 10) -------------------------------------------------


class Shop(scrapy.Spider):
    name = "shop"
    visits = 0

    def parse(self, response: Any) -> Any:  # pragma: no cover - never called
        yield from ()

    def parse_item(self, response: Any) -> Any:  # pragma: no cover
        yield from ()

    def _stop_testbed(self, spider: Any = None) -> None:  # pragma: no cover - must never be a callback
        raise AssertionError("a private method ran as a callback")

    @property
    def costly(self) -> Any:
        Shop.visits += 1
        return self.parse

    @classmethod
    def make(cls) -> Shop:  # pragma: no cover
        return cls()


class ShopRequest(scrapy.Request):
    """A Request subclass of the spider's own module (this test module)."""


class NotARequest:
    pass


def record(**r: Any) -> str:
    return json.dumps({"v": 1, "r": {"url": "http://shop.example/x", **r}})


@pytest.mark.crawl
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
        codec.decode(record(_class=f"{__name__}.NotARequest"), Shop())
    with pytest.raises(codec.CodecError, match="not a dotted path"):
        codec.decode(record(_class="Request"), Shop())


@pytest.mark.pure
def test_scrapy_and_project_request_classes_round_trip() -> None:
    spider = Shop()
    for r in (
        FormRequest("http://shop.example/f", formdata={"a": "1"}),
        JsonRequest("http://shop.example/j", data={}),
        ShopRequest("http://shop.example/s", callback=spider.parse_item),
    ):
        back = codec.decode(codec.encode(r, spider), spider)
        assert type(back) is type(r) and back.url == r.url
    # a class of another module of the project: only when SCALE_FRONTIER_REQUEST_CLASSES lists it
    data = record(_class="tests.crawling_requests.Listed")
    with pytest.raises(codec.CodecError, match="SCALE_FRONTIER_REQUEST_CLASSES"):
        codec.decode(data, spider)
    listed = codec.RecordRules.for_crawl(spider, {"SCALE_FRONTIER_REQUEST_CLASSES": [f"{__name__}.ShopRequest"]})
    other = codec.RecordRules.for_crawl(None, {"SCALE_FRONTIER_REQUEST_CLASSES": [f"{__name__}.ShopRequest"]})
    assert type(codec.decode(record(_class=f"{__name__}.ShopRequest"), None, other)) is ShopRequest
    assert f"{__name__}.NotARequest" not in listed.classes


@pytest.mark.pure
@pytest.mark.parametrize(
    "url",
    ["file:///etc/hostname", "FILE:///etc/passwd", "data:text/plain,hi", "s3://bucket/key", "ftp://ftp.example/x"],
)
def test_records_and_seeds_are_http_and_https_only(url: str) -> None:
    spider = Shop()
    with pytest.raises(codec.CodecError, match="scheme .* is not allowed"):
        codec.decode(record(url=url), spider)
    with pytest.raises(codec.CodecError, match="scheme .* is not allowed"):
        codec.request_from_feed(json.dumps(url), spider)
    with pytest.raises(codec.CodecError, match="scheme .* is not allowed"):
        codec.encode(scrapy.Request(url), spider)  # the spider's own: kept in memory, not stored
    scheme = url.partition(":")[0].lower()
    more = codec.RecordRules.for_crawl(spider, {"SCALE_FRONTIER_SCHEMES": ["http", "https", scheme]})
    assert codec.decode(record(url=url), spider, more).url.lower() == url.lower()


@pytest.mark.pure
def test_callbacks_must_be_public_methods_of_the_spider() -> None:
    spider = Shop()
    Shop.visits = 0  # (Scrapy's Request.to_dict, on encode, reads every member of the spider)
    for name in ("_stop_testbed", "__init__", "_set_crawler", "costly", "make", "name", "close", "nope"):
        with pytest.raises(codec.CodecError, match="not a public method"):
            codec.decode(record(callback=name), spider)
        with pytest.raises(codec.CodecError, match="not a public method"):
            codec.request_from_feed(json.dumps({"url": "http://shop.example/", "callback": name}), spider)
        with pytest.raises(codec.CodecError, match="not a public method"):
            codec.decode(record(callback="parse", errback=name), spider)
    assert Shop.visits == 0  # the property was never evaluated
    assert codec.decode(record(callback="parse_item"), spider).callback == spider.parse_item
    with pytest.raises(codec.CodecError, match="not a public method"):
        codec.encode(scrapy.Request("http://shop.example/", callback=spider._stop_testbed), spider)


@pytest.mark.pure
def test_crawlspider_rule_callbacks_are_scrapys_own_and_allowed() -> None:
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    class Crawl(CrawlSpider):
        name = "crawl"
        rules = (Rule(LinkExtractor(), callback="parse_item", follow=True),)

        def parse_item(self, response: Any) -> Any:  # pragma: no cover
            yield from ()

    spider = Crawl()
    r = scrapy.Request("http://shop.example/", callback=spider._callback, errback=spider._errback)
    back = codec.decode(codec.encode(r, spider), spider)
    assert back.callback == spider._callback and back.errback == spider._errback


@pytest.mark.crawl
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
