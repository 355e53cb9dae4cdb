"""An extension that exercises scrapy_scale.compat inside a real crawl and writes what it saw."""

from __future__ import annotations

import json
from typing import Any

from scrapy import signals

from scrapy_scale import compat


class Probe:
    def __init__(self, crawler: Any):
        self.crawler = crawler
        self.path = crawler.settings["TEST_COMPAT_FILE"]
        self.seen: dict[str, Any] = {"before_open": compat.engine_scheduler(crawler) is None}
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.reached_downloader, signal=signals.request_reached_downloader)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Any) -> Probe:
        return cls(crawler)

    def spider_opened(self, spider: Any) -> None:
        # the FeedExporter among the extensions; an item written through its item_scraped
        exporter = compat.feed_exporter(self.crawler)
        self.seen["feed_exporter"] = type(exporter).__name__
        if exporter is not None:
            self.seen["feeds_accepting"] = compat.feeds_accepting(exporter, {"probe": 1})
            compat.export_to_feeds(exporter, {"probe": "written through export_to_feeds"}, spider)

    def response_received(self, response: Any, request: Any, spider: Any) -> None:
        inprogress = compat.engine_requests_in_progress(self.crawler)
        self.seen.setdefault("in_progress", []).append(inprogress is not None and request in inprogress)
        self.seen["woke"] = compat.wake_engine(self.crawler)
        self.seen["closing_while_crawling"] = compat.engine_closing(self.crawler)
        sched = compat.engine_scheduler(self.crawler)
        self.seen["scheduler"] = f"{type(sched).__module__}.{type(sched).__qualname__}"

    def reached_downloader(self, request: Any, spider: Any) -> None:
        # with CONCURRENT_REQUESTS_PER_DOMAIN = 1 the request just put in its slot fills it
        full = compat.slot_full_check(self.crawler)
        host = request.url.split("/")[2].split(":")[0]
        self.seen.setdefault("slot_full", []).append(full is not None and full(host))
        self.seen["other_host_full"] = full is not None and full("unknown.example")
        # Downloader.active holds the request from fetch, before the middlewares, to its end
        active = compat.downloader_active(self.crawler)()
        self.seen.setdefault("in_downloader", []).append(active is not None and request in active)
        # a host with no slot yet and one request on its way to it: the per-domain concurrency (1)
        on_the_way = compat.slot_full_check(self.crawler, lambda host: 1)
        self.seen["new_host_full_at_its_concurrency"] = on_the_way is not None and on_the_way("unknown.example")

    def spider_closed(self, spider: Any) -> None:
        self.seen["closing_at_close"] = compat.engine_closing(self.crawler)
        with open(self.path, "w") as f:
            json.dump(self.seen, f)
