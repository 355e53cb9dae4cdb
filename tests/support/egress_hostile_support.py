"""Test extensions for tests/crawl/test_egress_hostile.py."""

from __future__ import annotations

import os
import threading
from typing import Any

from scrapy import signals

from tests.support.hang import hang_guard


class RemoveEgressFile:
    """Removes the egress file named by ``SCALE_EGRESSES`` once the spider is open (the
    pool has read it by then), so the end of the run works without it."""

    def __init__(self, crawler: Any):
        self.crawler = crawler
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Any) -> RemoveEgressFile:
        return cls(crawler)

    def spider_opened(self, spider: Any) -> None:
        os.remove(self.crawler.settings["SCALE_EGRESSES"])
        self.crawler.stats.set_value("test/egress_file_removed", 1)


class HangingProvider:
    """An egress provider whose first fetch() does not return until the crawl has shown
    it goes on without it (a request waited for the empty pool), or 30 s at most; the
    proxies are ``TEST_PROXIES``."""

    def __init__(self, crawler: Any):
        self.crawler = crawler
        self.calls = 0

    @classmethod
    def from_crawler(cls, crawler: Any) -> HangingProvider:
        return cls(crawler)

    def fetch(self) -> list[str]:
        import time

        self.calls += 1
        stats = self.crawler.stats
        stats.set_value("test/provider_calls", self.calls)
        if self.calls == 1:
            deadline = time.monotonic() + hang_guard(30)
            while not stats.get_value("scale/egress/wait/empty") and time.monotonic() < deadline:
                time.sleep(0.05)
            stats.set_value("test/provider_released_by_progress", int(bool(stats.get_value("scale/egress/wait/empty"))))
        return list(self.crawler.settings.getlist("TEST_PROXIES"))


class BlockedProvider:
    """An egress provider whose fetch() never returns: it waits for an event that nothing
    sets. Counts its calls in the stats (``test/blocked_provider_calls``)."""

    never = threading.Event()

    def __init__(self, crawler: Any):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Any) -> BlockedProvider:
        return cls(crawler)

    def fetch(self) -> list[str]:
        self.crawler.stats.inc_value("test/blocked_provider_calls")
        self.never.wait()
        return []
