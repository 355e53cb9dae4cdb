"""One conformance suite for every item store backend (SQLite file, MongoDB server),
and the batch writer on top of them. Real stores: a SQLite file, and the MongoDB wire
server of the `mongo_uri` fixture (SecantusDB, or a real mongod with MONGO_URI)."""

from __future__ import annotations

import pytest

from scrapy_scale.storage.backends import open_store

pytestmark = pytest.mark.pure


def test_urls_paths_and_redaction():
    from scrapy_scale.redact import redact_url as redact
    from scrapy_scale.storage.backends import sqlite_path

    assert sqlite_path("sqlite:///abs/items.sqlite") == "/abs/items.sqlite"
    assert sqlite_path("sqlite:////abs/items.sqlite") == "/abs/items.sqlite"
    assert sqlite_path("sqlite://rel/items.sqlite") == "rel/items.sqlite"
    assert (
        redact("mongodb://user:s3cret@db.example:27017/x?authSource=admin")
        == "mongodb://***@db.example:27017/x?authSource=admin"
    )
    assert redact("mongodb://127.0.0.1:27017/x") == "mongodb://127.0.0.1:27017/x"
    with pytest.raises(ValueError, match="unknown store URL scheme"):
        open_store("mysql://h/db")
