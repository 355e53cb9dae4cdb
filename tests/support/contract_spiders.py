"""Spiders for tests/crawl/test_frontier_contracts.py (SPIDER_MODULES = ["tests.support.contract_spiders"]):
the scheduler contracts Scrapy's own tests check, run against the testbed.

Each takes ``-a start_urls=BASE`` (the testbed's first host) and writes what it saw to
``-a report=PATH`` (JSON lines) when that matters.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy import signals
from scrapy.exceptions import DontCloseSpider


class _Base(scrapy.Spider):
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, start_urls: str = "", report: str = "", **kw: Any):
        super().__init__(**kw)
        self.base = start_urls.split(",")[0].rstrip("/")
        self.report_path = report

    def report(self, **row: Any) -> None:
        if self.report_path:
            with open(self.report_path, "a") as f:
                f.write(json.dumps(row) + "\n")


#: start priorities with ties, in the order start() yields them
PRIORITIES = [0, 1, 2, 1, 0, 2, 2, 0, 1, 0, 2, 1]


class PrioritiesSpider(_Base):
    """Start requests of priorities 0/1/2 (ties included); run with CONCURRENT_REQUESTS=1,
    the order the pages are served in is the order the scheduler hands them out."""

    name = "priorities"

    async def start(self) -> Any:
        for i, p in enumerate(PRIORITIES):
            yield scrapy.Request(f"{self.base}/item/{i + 1}", priority=p, cb_kwargs={"p": p})

    def parse(self, response: Any, p: int) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "priority": p}


class LazySpider(_Base):
    """Scrapy's lazy-scheduling pattern: one start request, then one more request each
    time the scheduler reports itself empty. Reports, at each such signal, len(scheduler)
    and the requests added but not yet taken by the engine: "empty" must mean none."""

    name = "lazy"
    pages = 6

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kw: Any) -> LazySpider:
        spider = super().from_crawler(crawler, *args, **kw)
        crawler.signals.connect(spider.on_empty, signal=signals.scheduler_empty)
        spider.sent = 1
        spider.parsed: set[str] = set()
        return spider

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/item/1")

    def on_empty(self) -> None:
        slot = self.crawler.engine._slot
        taken = {r.url for r in slot.inprogress} | self.parsed
        waiting = [n for n in range(1, self.sent + 1) if f"{self.base}/item/{n}" not in taken]
        self.report(event="empty", len=len(slot.scheduler), sent=self.sent, waiting=waiting)
        if self.sent < self.pages:
            self.sent += 1
            self.crawler.engine.crawl(scrapy.Request(f"{self.base}/item/{self.sent}"))

    def parse(self, response: Any) -> Iterator[dict[str, Any]]:
        self.parsed.add(response.url)
        yield {"url": response.url}


class LazyStartSpider(_Base):
    """Scrapy's documented lazy start (its engine test ``test_lazy``): ``start()`` yields
    pages 1, 2, 4, and before each it waits for ``scheduler_empty`` while
    ``engine.needs_backout()``; page 1's callback yields page 3. With
    CONCURRENT_REQUESTS=1 the pages are fetched 1, 2, 3, 4."""

    name = "lazy_start"

    async def start(self) -> Any:
        engine = self.crawler.engine
        for n in (1, 2, 4):
            if engine.needs_backout():
                await self.crawler.signals.wait_for(signals.scheduler_empty)
            yield scrapy.Request(f"{self.base}/item/{n}")

    def parse(self, response: Any) -> Iterator[Any]:
        yield {"url": response.url}
        if response.url.endswith("/item/1"):
            yield scrapy.Request(f"{self.base}/item/3")


#: Scrapy's engine tests of the send order of start requests (RequestSendOrderTestCase in
#: its tests/test_engine_loop.py): what start() yields and what it hands the scheduler
#: straight away, as ("yield" | "enqueue", page, priority), in order; pages are sent in
#: the order 1, 2, 3, ... with CONCURRENT_REQUESTS = 1
def _steps(spec: str) -> list[tuple[str, int, int]]:
    """``"y1 e2+1"``: yield page 1, enqueue page 2 of priority 1 (0 unless given)."""
    out = []
    for step in spec.split():
        page, _, priority = step[1:].partition("+")
        out.append(("yield" if step[0] == "y" else "enqueue", int(page), int(priority or 0)))
    return out


START_ORDERS: dict[str, list[tuple[str, int, int]]] = {
    # priority first; within one, the crawl's own requests before start requests, these in order
    "default": _steps("y1 e2+1 e5 y6 y3+1 y4+1"),
    # SCHEDULER_START_MEMORY_QUEUE = LIFO: only the start requests' order changes
    "lifo_start": _steps("y1 e2+1 e5 y6 y4+1 y3+1"),
    # SCHEDULER_START_MEMORY_QUEUE = None: one queue per priority, LIFO, start requests too
    "shared_queues": _steps("y1 e7+1 e6+1 e13 e12 y11 y10 y5+1 y4+1 e3+1 e2+1 e9 e8"),
}


class StartOrderSpider(_Base):
    """``-a order=NAME`` of :data:`START_ORDERS`: start() yields some pages and hands
    others to the scheduler itself, as Scrapy's engine tests do."""

    name = "start_order"

    def __init__(self, order: str = "default", **kw: Any):
        super().__init__(**kw)
        self.steps = START_ORDERS[order]

    async def start(self) -> Any:
        scheduler = self.crawler.engine._slot.scheduler
        for how, page, priority in self.steps:
            request = scrapy.Request(f"{self.base}/item/{page}", priority=priority)
            if how == "yield":
                yield request
            else:
                scheduler.enqueue_request(request)

    def parse(self, response: Any) -> Iterator[Any]:
        yield {"url": response.url}


class LazyDupesSpider(_Base):
    """Scrapy's lazy start whose later start requests are duplicates while a slow page is
    in flight: ``start()`` yields the slow page 1 and page 2, waits for page 2's answer,
    then page 2 twice more (duplicates) and page 3, each after ``scheduler_empty`` while
    ``engine.needs_backout()``. The scheduler answers each duplicate at once, so page 3
    goes out long before page 1's answer."""

    name = "lazy_dupes"

    async def start(self) -> Any:
        from scrapy.utils.defer import deferred_to_future
        from twisted.internet import defer

        self.second = defer.Deferred()
        engine = self.crawler.engine
        for n in (1, 2, 0, 2, 2, 3):
            if n == 0:
                await deferred_to_future(self.second)
                continue
            if engine.needs_backout():
                await self.crawler.signals.wait_for(signals.scheduler_empty)
            yield scrapy.Request(f"{self.base}/item/{n}")

    def parse(self, response: Any) -> Iterator[Any]:
        yield {"url": response.url}
        if response.url.endswith("/item/2") and not self.second.called:
            self.second.callback(None)


class RefetchSpider(_Base):
    """A -> B -> A -> B -> A, every hop ``dont_filter=True``: Scrapy fetches all five,
    whatever the state of the page's record when it is asked for again."""

    name = "refetch"
    hops = 5

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/item/1", cb_kwargs={"hop": 1})

    def parse(self, response: Any, hop: int) -> Iterator[Any]:
        yield {"url": response.url, "hop": hop}
        if hop < self.hops:
            page = 2 if hop % 2 else 1
            yield scrapy.Request(f"{self.base}/item/{page}", dont_filter=True, cb_kwargs={"hop": hop + 1})


class NavSpider(_Base):
    """A site whose links repeat, as menus and related links do: ``/item/i`` (1 to
    ``-a pages``) links to the home page ``/item/1`` and to the 5 pages after ``5i``
    (modulo ``pages``), so most links are to pages already found."""

    name = "nav"

    def __init__(self, pages: str = "30", **kw: Any):
        super().__init__(**kw)
        self.pages = int(pages)

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/item/1")

    def parse(self, response: Any) -> Iterator[Any]:
        i = int(response.url.rsplit("/", 1)[1])
        yield {"url": response.url}
        yield scrapy.Request(f"{self.base}/item/1")
        for k in range(1, 6):
            yield scrapy.Request(f"{self.base}/item/{(5 * i + k) % self.pages + 1}")


class ProductItem(scrapy.Item):
    name = scrapy.Field()
    price = scrapy.Field()
    seen = scrapy.Field()


@dataclasses.dataclass
class Listing:
    url: str
    page: int


class ItemInKwargsSpider(_Base):
    """The listing/detail idiom with objects in cb_kwargs and meta: a listing passes a
    scrapy.Item and a dataclass to each detail page, which links back to its listing
    with the dataclass (a loop only dedup ends). ``-a opaque=1`` adds a value no record
    can hold, so every request is kept in memory only."""

    name = "item_kwargs"

    def __init__(self, opaque: str = "", **kw: Any):
        super().__init__(**kw)
        self.opaque = bool(opaque)

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/", callback=self.parse_listing)

    def parse_listing(self, response: Any, listing: Listing | None = None) -> Iterator[Any]:
        here = Listing(response.url, 1)
        for href in response.css("a::attr(href)").getall():
            if "/item/" in href:
                item = ProductItem(
                    name=href,
                    price=decimal.Decimal("1.10"),
                    seen=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
                )
                meta = {"tags": {"a", "b"}, "pair": (1, 2), "raw": b"\x00"}
                if self.opaque:
                    meta["opaque"] = Opaque()
                yield response.follow(
                    href, callback=self.parse_detail, cb_kwargs={"item": item, "listing": here}, meta=meta
                )

    def parse_detail(self, response: Any, item: ProductItem, listing: Listing) -> Iterator[Any]:
        ok = (
            isinstance(item, ProductItem)
            and isinstance(listing, Listing)
            and isinstance(item["price"], decimal.Decimal)
            and isinstance(item["seen"], datetime.datetime)
            and response.meta["tags"] == {"a", "b"}
            and response.meta["pair"] == (1, 2)
            and response.meta["raw"] == b"\x00"
        )
        yield {"url": response.url, "types_ok": ok}
        meta = {"opaque": Opaque()} if self.opaque else {}
        yield response.follow(
            listing.url, callback=self.parse_listing, cb_kwargs={"listing": listing}, meta=meta
        )  # back to the listing


class Opaque:
    """A value the frontier cannot store."""


class SlotDelaySpider(_Base):
    """Scrapy's downloader-slots test: requests that name their slot
    (``meta["download_slot"]``) whose ``DOWNLOAD_SLOTS`` entry has a delay; the pages
    must go out that delay apart, as Scrapy's downloader spaces them. Start requests,
    then one page found by a callback (a request the frontier gets mid-crawl)."""

    name = "slot_delay"
    slot = "shop-slot"
    custom_settings = {"DOWNLOAD_SLOTS": {slot: {"delay": 2, "randomize_delay": False}}}

    async def start(self) -> Any:
        for n in (1, 2, 3):
            yield scrapy.Request(f"{self.base}/item/{n}", meta={"download_slot": self.slot})

    def parse(self, response: Any) -> Iterator[Any]:
        yield {"url": response.url, "slot": response.meta.get("download_slot")}
        if response.url.endswith("/item/1"):
            yield scrapy.Request(f"{self.base}/item/4", meta={"download_slot": self.slot})


class IdleOnceSpider(_Base):
    """Scrapy's engine test of ``spider_idle`` (``TestSpiderIdle.test_dont_close_spider``):
    the first time the spider is idle its handler crawls one more page and raises
    ``DontCloseSpider``; the second time it lets the spider close. Reports each call."""

    name = "idle_once"

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kw: Any) -> IdleOnceSpider:
        spider = super().from_crawler(crawler, *args, **kw)
        crawler.signals.connect(spider.on_idle, signal=signals.spider_idle)
        spider.idle_calls = 0
        return spider

    async def start(self) -> Any:
        yield scrapy.Request(f"{self.base}/item/1")

    def on_idle(self) -> None:
        self.idle_calls += 1
        self.report(event="idle", call=self.idle_calls)
        if self.idle_calls == 1:
            self.crawler.engine.crawl(scrapy.Request(f"{self.base}/item/2"))
            raise DontCloseSpider

    def parse(self, response: Any) -> Iterator[dict[str, Any]]:
        yield {"url": response.url}
