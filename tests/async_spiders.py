"""The catalog spider with async callbacks (``async def`` with ``yield``), for the tests of
the outcome spider middleware's async form (SPIDER_MODULES = ["tests.async_spiders"])."""

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
