"""A probe spider and a scheduler for the outcome glue tests (loaded by crawl subprocesses
through SPIDER_MODULES / SCHEDULER; this module holds no tests itself)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.core.scheduler import Scheduler
from scrapy.downloadermiddlewares.retry import get_retry_request

from scrapy_scale.outcomes import expects_items

NOT_BEFORE_DELAY = 2.0


class EagerScheduler(Scheduler):
    """Claims to hold delayed requests but hands them out at once: the downloader-side
    guard of the outcome middleware must still keep them from being sent early."""

    supports_not_before = True


class ProbeSpider(scrapy.Spider):
    name = "outcomes_probe"

    def __init__(self, start_urls: str = "", **kwargs: Any):
        super().__init__(**kwargs)
        self.base = start_urls.split(",")[0].rstrip("/")

    async def start(self) -> AsyncIterator[Any]:
        b = self.base
        yield scrapy.Request(b + "/item/1", callback=self.boom)
        yield scrapy.Request(b + "/item/2", meta={"dont_retry": True})
        yield scrapy.Request(b + "/item/3", meta={"max_retry_times": 4})
        self.not_before = time.time() + NOT_BEFORE_DELAY
        self.logger.info("probe not_before=%.3f", self.not_before)
        yield scrapy.Request(b + "/item/4", meta={"scale_not_before": self.not_before})
        yield scrapy.Request(b + "/item/5", errback=self.errback)
        yield scrapy.Request(b + "/item/6", callback=self.half)
        yield scrapy.Request(b + "/item/7", callback=self.nothing)
        yield scrapy.Request(b + "/item/8", callback=self.nothing, meta={"scale_expect_items": False})
        yield scrapy.Request(b + "/item/9", callback=self.retry_once)
        yield scrapy.Request(b + "/item/11", callback=self.copy_meta)

    def parse(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url}

    def boom(self, response: Any) -> Iterator[dict[str, Any]]:
        raise ValueError("a bug in the callback")

    def half(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url}
        raise KeyError("price")

    @expects_items
    def nothing(self, response: Any) -> Iterator[dict[str, Any]]:
        return iter(())

    def retry_once(self, response: Any) -> Iterator[Any]:
        if response.meta.get("retry_times", 0) < 1:
            yield get_retry_request(response.request, spider=self, reason="looks incomplete")
            return
        yield {"url": response.url}

    def copy_meta(self, response: Any) -> Iterator[Any]:
        # the anti-pattern: all of response.meta (chain keys included) copied into a new request
        yield response.follow("/item/10", callback=self.parse, meta=dict(response.meta))

    def errback(self, failure: Any) -> Iterator[dict[str, Any]]:
        yield {"url": failure.request.url, "errback": failure.type.__name__}
