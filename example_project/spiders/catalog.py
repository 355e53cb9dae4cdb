"""The catalog spider: listing pages -> detail pages -> one item per product.

    scrapy crawl catalog                                  # starts its own testbed (3 hosts x 60 pages)
    scrapy crawl catalog -a hosts=5 -a pages=200 -a faults="429:/item/*,p=0.1,retry_after=1"
    scrapy crawl catalog -a start_urls=http://shop1.example.test:8080/,http://...   # a running testbed
                                                          # (plus its settings, see docs/testbed.md)
    scrapy crawl catalog -a seeded=1 -s SCALE_FRONTIER_WAIT_FOR_SEEDS=True   # a worker: the job's seeds
                                                          # come from `scrapy scale seed` or a feeder

Targets come from ``-a start_urls=URL,URL`` or the ``CATALOG_START_URLS`` setting;
without either, the spider starts a :class:`~scrapy_scale.testbed.Testbed` in this
process (options ``-a hosts= pages= seed= faults=``) and installs the testbed's name
resolver on the reactor before its first request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy import signals
from scrapy.http import Response

from scrapy_scale import meta_keys
from scrapy_scale.testbed import Testbed, install_resolver

#: the demo's faults: each hits a few pages once, so a crawl that retries well gets every item
#: (but /item/60 of shop1 is really gone: 404)
DEFAULT_FAULTS = (
    "429@1:/item/1*,first=1,retry_after=1; 503@2:/item/2*,first=1,retry_after=1;"
    " reset@3:/item/3*,first=1; 500:/item/5,first=1; 404@1:/item/60"
)


#: the demo testbed's port: fixed, so an interrupted demo resumes against the same URLs; a
#: free one is used when it is taken (the items' keys do not depend on it: keyed by SKU)
DEMO_PORT = 8370


def _start_demo_testbed(options: dict[str, Any]) -> Testbed:
    try:
        return Testbed(port=DEMO_PORT, **options).start()
    except (OSError, RuntimeError):  # the port is taken (another demo is running)
        return Testbed(**options).start()


def _key_items_by_sku(settings: Any) -> None:
    """The demo's items are keyed by their SKU, not by their page's URL: the URL holds the
    testbed's port, which is not always :data:`DEMO_PORT`, and a rerun on another port would
    store every item again beside the first. A key the project set wins."""
    if settings.getpriority("SCALE_ITEM_KEY") is None:
        settings.set("SCALE_ITEM_KEY", {"*": ["sku"]}, priority="spider")


class CatalogSpider(scrapy.Spider):
    name = "catalog"

    def __init__(
        self,
        start_urls: str | list[str] | None = None,
        hosts: str | int = 3,
        pages: str | int = 60,
        seed: str | int = 1,
        faults: str = DEFAULT_FAULTS,
        seeded: str | bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if isinstance(start_urls, str):
            start_urls = [u.strip() for u in start_urls.split(",") if u.strip()]
        self.start_urls = list(start_urls or [])
        self.testbed_options = {"hosts": int(hosts), "pages": int(pages), "seed": int(seed), "faults": faults}
        self.testbed: Testbed | None = None
        #: no start requests of its own: the job is seeded from outside (docs/distributed.md)
        self.seeded = str(seeded).lower() in ("1", "true", "yes")

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> CatalogSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        if not spider.start_urls:
            spider.start_urls = crawler.settings.getlist("CATALOG_START_URLS")
        if not spider.start_urls and not spider.seeded:
            _key_items_by_sku(crawler.settings)
        # the demo testbed starts with the crawl (in start()), not here: Scrapy builds the
        # spider before the add-on checks the settings, and a bad setting must stop the
        # crawl before anything was started
        crawler.signals.connect(spider._stop_testbed, signal=signals.spider_closed)
        return spider

    async def start(self) -> AsyncIterator[Any]:
        if self.seeded:
            return
        if not self.start_urls:
            self.testbed = _start_demo_testbed(self.testbed_options)
            self.start_urls = self.testbed.start_urls
            self.logger.info(
                "No target given: started a testbed of %d hosts x %d pages (faults: %s)",
                len(self.testbed.hosts),
                self.testbed.pages,
                self.testbed_options["faults"] or "none",
            )
            # Scrapy installed its resolver when the reactor started; ours goes on top now
            install_resolver(hosts=self.testbed.addresses)
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[scrapy.Request]:
        """A listing page: every detail link, then the next listing page."""
        for href in response.css("a.item::attr(href)").getall():
            yield response.follow(href, callback=self.parse_item, meta={meta_keys.EXPECT_ITEMS: True})
        nxt = response.css("a.next::attr(href)").get()
        if nxt:
            yield response.follow(nxt, callback=self.parse)

    def parse_item(self, response: Response) -> Iterator[dict[str, Any]]:
        """A detail page: one item, or none when the page has no product (block page, new layout)."""
        sku = response.css("span.sku::text").get()
        if not sku:
            self.logger.warning("No product on %s (block page or changed layout?)", response.url)
            return
        price = response.css("span.price::text").get()
        yield {
            "sku": sku.strip(),
            "title": (response.css("h1.title::text").get() or "").strip() or None,
            "price": float(price) if price else None,
            "url": response.url,
        }

    def _stop_testbed(self, spider: scrapy.Spider) -> None:
        tb = self.testbed
        if tb is None:
            return
        kinds = Counter(r.kind for r in tb.log)
        self.logger.info(
            "Testbed served %d requests (%s)",
            sum(kinds.values()),
            ", ".join(f"{k}: {n}" for k, n in kinds.most_common()),
        )
        tb.stop()
