"""A site's robots.txt ``Crawl-delay``, read when Scrapy parsed its robots.txt (the
``robots_parsed`` signal) and handed to the pacing as the site's floor."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

    from scrapy_scale.throttle.pacing import Pacing

#: the throttle's glue logs under one name (users filter on it)
logger = logging.getLogger("scrapy_scale.throttle")


class CrawlDelays:
    def __init__(self, pacing: Pacing, settings: BaseSettings):
        self.pacing = pacing
        #: the user agent whose Crawl-delay applies (as Scrapy's RobotsTxtMiddleware picks it)
        self.agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"

    def on_robots(self, robotparser: Any = None, request: Request | None = None, **kw: Any) -> None:
        if robotparser is None or request is None or not hasattr(robotparser, "crawl_delay"):
            return
        try:
            delay = robotparser.crawl_delay(self.agent)
        except Exception:  # noqa: BLE001 - a parser without crawl-delay support
            return
        host = (urlsplit(request.url).hostname or "").lower()
        self.pacing.touch(host)  # robots.txt was a request to the site too
        if delay is not None and delay >= 0:
            self.pacing.set_crawl_delay(host, float(delay))
            logger.info("throttle: %s has robots.txt Crawl-delay %.3g s", host, float(delay))
