"""Idempotent item storage: stable item keys, durable upserts to SQLite or MongoDB.

Enable with the add-on, or alone::

    ITEM_PIPELINES = {"scrapy_scale.storage.StorePipeline": 900}
    SPIDER_MIDDLEWARES = {"scrapy_scale.storage.StoreSpiderMiddleware": 50}

See docs/storage.md.
"""

from scrapy_scale.storage.pipeline import StorePipeline
from scrapy_scale.storage.sources import StoreSpiderMiddleware

__all__ = ["StorePipeline", "StoreSpiderMiddleware"]
