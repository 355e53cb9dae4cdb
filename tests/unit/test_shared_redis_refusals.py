"""What a record, a seed or a job name in a shared Redis can do to a worker: nothing but
be crawled or be refused (docs/frontier.md, "What a shared Redis can and cannot do to a
worker"). Plain Python, no Redis: the checks a worker applies to a job name, a record or
a seed before it uses them (tests/crawl/test_shared_redis.py runs a real Redis at them)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import scrapy
from scrapy.http import FormRequest, JsonRequest

from scrapy_scale import config
from scrapy_scale.frontier.records import codec

pytestmark = pytest.mark.pure


@pytest.mark.parametrize("name", ["books[1]", "a*", "a b", "x:y", "{j}", "", ".hidden", "-x", "é", "j" * 101])
def test_scale_job_is_checked_at_startup(name: str) -> None:
    with pytest.raises(config.ScaleSettingError) as e:
        config.get({"SCALE_JOB": name}, "SCALE_JOB")
    assert e.value.setting == "SCALE_JOB"
    if name:
        assert "letters, digits" in str(e.value)


@pytest.mark.parametrize("name", ["books1", "catalog", "shop.example-2026_11", "J" * 100])
def test_ordinary_job_names_are_accepted(name: str) -> None:
    assert config.get({"SCALE_JOB": name}, "SCALE_JOB") == name


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


class NotARequest:
    """A class in the spider's module that is not a Request (a record may not name it)."""


class ShopRequest(scrapy.Request):
    """A Request subclass of the spider's own module (this test module)."""


def record(**r: Any) -> str:
    return json.dumps({"v": 1, "r": {"url": "http://shop.example/x", **r}})


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
