"""Variants of the catalog spider for tests (SPIDER_MODULES = ["tests.variant_spiders"]):
async callbacks (``async def`` with ``yield``); items of a ``scrapy.Item`` class."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy

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
