"""Where each item came from: the spider middleware that notes, for every item a callback
yields, the response URL, the item's position among that response's items and the
callback's name, and the table (shared through the crawler's context) the store pipeline
reads them from."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.http import Response

from scrapy_scale.context import ScaleContext


class Source:
    """Where an item came from."""

    __slots__ = ("item", "url", "index", "callback")

    def __init__(self, item: Any, url: str | None, index: int, callback: str):
        self.item, self.url, self.index, self.callback = item, url, index, callback


class SourceTable:
    """item object -> its sources, FIFO (the same object may be yielded twice)."""

    def __init__(self) -> None:
        self._by_id: dict[int, deque[Source]] = {}
        #: set by StorePipeline; without it nobody would pop, so nothing is recorded
        self.consumed = False

    def add(self, src: Source) -> None:
        self._by_id.setdefault(id(src.item), deque()).append(src)

    def pop(self, item: Any) -> Source | None:
        q = self._by_id.get(id(item))
        if not q:
            return None
        src = q.popleft()
        if not q:
            del self._by_id[id(item)]
        return src if src.item is item else None

    def peek(self, item: Any) -> Source | None:
        """The source ``pop`` would return, left in place (a pipeline before the store's)."""
        q = self._by_id.get(id(item))
        return q[0] if q and q[0].item is item else None

    def __len__(self) -> int:
        return len(self._by_id)


def callback_name(spider: Spider | None, response: Response | None) -> str:
    spider_name = type(spider).__name__ if spider is not None else "Spider"
    if response is None:
        return f"{spider_name}.start"
    req = getattr(response, "request", None)
    cb = getattr(req, "callback", None) if req is not None else None
    name = getattr(cb, "__name__", None) or "parse"
    return f"{spider_name}.{name}"


def sources_of(crawler: Crawler) -> SourceTable:
    ctx = ScaleContext.of(crawler)
    if ctx.item_sources is None:
        ctx.item_sources = SourceTable()
    return ctx.item_sources  # type: ignore[no-any-return]


class StoreSpiderMiddleware:
    """Records each yielded item's response, index and callback for StorePipeline."""

    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        self.sources = sources_of(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StoreSpiderMiddleware:
        return cls(crawler)

    def _note(self, out: Any, response: Response | None, state: list[int], cb: str) -> None:
        if out is None or isinstance(out, Request) or not self.sources.consumed:
            return
        self.sources.add(Source(out, response.url if response is not None else None, state[0], cb))
        state[0] += 1

    def process_spider_output(self, response: Response, result: Iterable[Any], spider: Spider | None = None):
        state = [0]
        cb = callback_name(self.crawler.spider, response)
        for out in result:
            self._note(out, response, state, cb)
            yield out

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        state = [0]
        cb = callback_name(self.crawler.spider, response)
        async for out in result:
            self._note(out, response, state, cb)
            yield out

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        state = [0]
        cb = callback_name(self.crawler.spider, None)
        async for out in start:
            self._note(out, None, state, cb)
            yield out
