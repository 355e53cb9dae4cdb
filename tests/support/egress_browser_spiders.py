"""Spiders for tests/crawl/test_egress_browser.py: pages rendered by Chromium (scrapy-playwright)."""

from __future__ import annotations

import scrapy
from scrapy import signals
from scrapy.exceptions import DontCloseSpider


class BrowserCatalog(scrapy.Spider):
    """Listing pages and details through the browser. ``raise_on`` item numbers raise in a
    callback that kept its page (``playwright_include_page``); ``keep_pages``: every item
    request keeps its page (callbacks that do not raise, nor close it). At idle the spider
    waits until every kept page is closed (by the egress pool), then records how many were."""

    name = "browser_catalog"

    def __init__(
        self,
        start_urls: str = "",
        raise_on: str = "",
        bad_context: str = "",
        ignore_tls: str = "",
        keep_pages: str = "",
        **kw,
    ):
        super().__init__(**kw)
        self.ignore_tls = bool(ignore_tls)  # the testbed's self-signed certificate (tls=True)
        self.start_urls = [u for u in start_urls.split(",") if u]
        self.raise_on = {int(x) for x in raise_on.split("+") if x}
        self.bad_context = bool(bad_context)
        self.keep_pages = bool(keep_pages)
        self.kept: list = []
        self.idle_checks = 0

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_idle, signal=signals.spider_idle)
        return spider

    def meta(self, **more):
        m = {"playwright": True}
        if self.bad_context:
            m["playwright_context_kwargs"] = {"viewport": "not a viewport"}
        elif self.ignore_tls:
            m["playwright_context_kwargs"] = {"ignore_https_errors": True}
        m.update(more)
        return m

    async def start(self):
        for url in self.start_urls:
            yield scrapy.Request(url, meta=self.meta(), callback=self.parse)

    def parse(self, response):
        for href in response.css("a.item::attr(href)").getall()[:6]:
            n = int(href.rstrip("/").rsplit("/", 1)[1])
            keep = n in self.raise_on or self.keep_pages
            yield response.follow(href, self.parse_item, meta=self.meta(playwright_include_page=keep))

    def parse_item(self, response):
        page = response.meta.get("playwright_page")
        if page is not None:
            self.kept.append(page)
        if page is not None and not self.keep_pages:
            raise ValueError("a callback that fails with its page open")
        yield {"url": response.url, "sku": response.css("span.sku::text").get()}

    def on_idle(self):
        open_pages = [p for p in self.kept if not p.is_closed()]
        if open_pages and self.idle_checks < 20:
            self.idle_checks += 1
            raise DontCloseSpider
        self.crawler.stats.set_value("test/kept_pages", len(self.kept))
        self.crawler.stats.set_value("test/kept_pages_open", len(open_pages))
