"""Pipelines users write today, for side-by-side benchmarks (not part of scrapy-scale).

``MongoInsertOnePipeline`` is the MongoDB pipeline of Scrapy's documentation (item
pipeline examples): one ``insert_one`` per item, no key, no upsert, no batching.
"""

from __future__ import annotations

from typing import Any

from itemadapter import ItemAdapter


class MongoInsertOnePipeline:
    collection_name = "items"

    def __init__(self, mongo_uri: str, mongo_db: str):
        self.mongo_uri = mongo_uri
        self.mongo_db = mongo_db

    @classmethod
    def from_crawler(cls, crawler: Any) -> MongoInsertOnePipeline:
        return cls(crawler.settings.get("MONGO_URI"), crawler.settings.get("MONGO_DATABASE", "items"))

    def open_spider(self, spider: Any = None) -> None:
        import pymongo

        self.client: Any = pymongo.MongoClient(self.mongo_uri)
        self.db = self.client[self.mongo_db]

    def close_spider(self, spider: Any = None) -> None:
        self.client.close()

    def process_item(self, item: Any, spider: Any = None) -> Any:
        self.db[self.collection_name].insert_one(ItemAdapter(item).asdict())
        return item
