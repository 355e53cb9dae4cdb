"""Spiders for tests/crawl/test_metrics_alerts.py (SPIDER_MODULES = ["tests.support.metrics_spiders"]).

A browser integration registers ``ScaleContext.browser`` with ``contexts`` and
``processes``; the metrics export them as ``scrapy_scale_browser_contexts`` /
``_processes``. These spiders hold one real OS resource (a pipe) per rendered page as
their "page", and register such an object: ``leaky_pages`` never closes its pages (the
bug the leak alert is for), ``tidy_pages`` closes each page once parsed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import scrapy

from scrapy_scale.context import ScaleContext


class Pages:
    """Open pages: one pipe each, closed by close()."""

    def __init__(self) -> None:
        self.open: dict[int, tuple[int, int]] = {}
        self._n = 0

    def new(self) -> int:
        self._n += 1
        self.open[self._n] = os.pipe()
        return self._n

    def close(self, page: int) -> None:
        for fd in self.open.pop(page, ()):
            os.close(fd)

    @property
    def contexts(self) -> int:
        return len(self.open)

    processes = 1


class LeakyPagesSpider(scrapy.Spider):
    name = "leaky_pages"
    closes_pages = False
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, start_urls: str = "", **kw: Any):
        super().__init__(**kw)
        self.start_urls = [u for u in start_urls.split(",") if u]
        self.pages = Pages()

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Any:
        spider = super().from_crawler(crawler, *args, **kwargs)
        ScaleContext.of(crawler).browser = spider.pages
        return spider

    def parse(self, response: Any) -> Iterator[Any]:
        page = self.pages.new()  # "render" the page
        for href in response.css("a.item::attr(href), a.next::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
        if response.css("h1.title"):
            yield {"url": response.url, "title": response.css("h1.title::text").get()}
        if self.closes_pages:
            self.pages.close(page)

    def closed(self, reason: str) -> None:
        for page in list(self.pages.open):
            self.pages.close(page)


class TidyPagesSpider(LeakyPagesSpider):
    name = "tidy_pages"
    closes_pages = True
