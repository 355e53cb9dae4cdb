"""Variants of the catalog spider for tests (SPIDER_MODULES = ["tests.support.variant_spiders"]):
async callbacks (``async def`` with ``yield``); items of a ``scrapy.Item`` class; the catalog
as a ``CrawlSpider``; listing pages that each yield hundreds of items."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

from example_project.spiders.catalog import CatalogSpider


class AsyncCatalogSpider(CatalogSpider):
    name = "catalog_async"

    async def parse(self, response: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        for x in super().parse(response):
            yield x

    async def parse_item(self, response: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        for x in super().parse_item(response):
            yield x


class CatalogItem(scrapy.Item):
    """The catalog's item as a ``scrapy.Item`` class (feeds that filter by class)."""

    sku = scrapy.Field()
    title = scrapy.Field()
    price = scrapy.Field()
    url = scrapy.Field()


class ItemCatalogSpider(CatalogSpider):
    """The catalog spider yielding :class:`CatalogItem` objects instead of dicts."""

    name = "catalog_items"

    def parse_item(self, response: Any) -> Iterator[Any]:  # type: ignore[override]
        for x in super().parse_item(response):
            yield CatalogItem(**x)


class CrawlCatalogSpider(CrawlSpider):
    """The catalog as a ``CrawlSpider``: one rule follows the listing pages, one parses the
    detail pages. Every rule request has the callback ``_callback``, so listing pages (no
    items, by design) and detail pages count under one callback name."""

    name = "catalog_crawl"
    rules = (
        Rule(LinkExtractor(restrict_css="a.item"), callback="parse_item"),
        Rule(LinkExtractor(restrict_css="a.next"), follow=True),
    )

    def __init__(self, start_urls: str = "", **kwargs: Any):
        super().__init__(**kwargs)
        self.start_urls = [u for u in start_urls.split(",") if u]

    def parse_item(self, response: Any) -> Iterator[Any]:
        yield from CatalogSpider.parse_item(self, response)  # type: ignore[arg-type]


class ManyItemsCatalogSpider(CatalogSpider):
    """The catalog whose listing pages each yield ``-a per_listing=N`` items (a row each, keyed
    by its ``sku``: listing URL and row) besides their links. Every item carries the crawl's
    ``CONCURRENT_ITEMS``, so a test sees which bound the items went through."""

    name = "catalog_many"

    def __init__(self, per_listing: str | int = 300, **kwargs: Any):
        super().__init__(**kwargs)
        self.per_listing = int(per_listing)

    def parse(self, response: Any) -> Iterator[Any]:  # type: ignore[override]
        bound = self.settings.getint("CONCURRENT_ITEMS")
        for row in range(self.per_listing):
            yield {"sku": f"{response.url}#{row}", "url": response.url, "concurrent_items": bound}
        yield from super().parse(response)
