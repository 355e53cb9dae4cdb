"""Variants of the catalog spider for tests (SPIDER_MODULES = ["tests.variant_spiders"]):
async callbacks (``async def`` with ``yield``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from example_project.spiders.catalog import CatalogSpider


class AsyncCatalogSpider(CatalogSpider):
    name = "catalog_async"

    async def parse(self, response: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        for x in super().parse(response):
            yield x

    async def parse_item(self, response: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        for x in super().parse_item(response):
            yield x
