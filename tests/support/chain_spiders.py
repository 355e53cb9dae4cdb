"""Spiders for tests/crawl/test_setting_checks.py (SPIDER_MODULES = ["tests.support.chain_spiders"])."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy


class CopyMetaSpider(scrapy.Spider):
    """/item/1 (failing once, so its chain reaches attempt 2) links to /item/2 with all of
    response.meta copied, chain keys included: the anti-pattern Scrapy warns about."""

    name = "copy_meta"
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, start_urls: str = "", **kw: Any):
        super().__init__(**kw)
        self.base = start_urls.split(",")[0].rstrip("/")

    async def start(self) -> Any:
        yield scrapy.Request(self.base + "/item/1", callback=self.copy_meta)

    def copy_meta(self, response: Any) -> Iterator[Any]:
        yield {"url": response.url}
        yield response.follow("/item/2", callback=self.parse, meta=dict(response.meta))

    def parse(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url}
