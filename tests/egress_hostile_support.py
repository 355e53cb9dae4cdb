"""Test extensions for tests/test_egress_hostile.py."""

from __future__ import annotations

import os
from typing import Any

from scrapy import signals


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
