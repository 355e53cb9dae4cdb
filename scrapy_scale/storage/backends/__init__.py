"""Item stores: idempotent upserts keyed by the item key (blocking; run on the writer thread).

Every backend has the same semantics (one conformance test suite runs on all):

* ``write(rows, now)`` upserts each row: the row's fields are set (fields stored
  earlier and absent from the row are kept), ``last_seen`` becomes ``now`` and
  ``first_seen`` is set only when the key is new. The result tells which keys were
  inserted and which updated; rows the store refuses for good are returned in
  ``failed`` with the reason, rows to try again later in ``retry``.
* ``dead_letter(rows, now)`` upserts dead-letter records by their id.
* An outage raises :class:`StoreUnavailable`; the caller retries the same rows (the
  writes are idempotent, so a batch that was half applied is simply applied again).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from scrapy_scale.storage.backends.base import DeadRow, Row, Store, StoreBroken, StoreUnavailable, WriteResult
from scrapy_scale.storage.backends.mongo import MongoStore
from scrapy_scale.storage.backends.sqlite import SQLiteStore, sqlite_error, sqlite_path

__all__ = [
    "DeadRow",
    "MongoStore",
    "Row",
    "SQLiteStore",
    "Store",
    "StoreBroken",
    "StoreUnavailable",
    "WriteResult",
    "open_store",
    "sqlite_error",
    "sqlite_path",
]


def open_store(
    url: str, collection: str = "items", dead_letter: str | None = None, fields: Mapping[str, str] | None = None
) -> Store:
    """A store for ``url`` (not connected yet: call ``open()`` on the thread that will use it)."""
    scheme = urlsplit(url).scheme
    dl = dead_letter or f"{collection}_dead_letter"
    if scheme == "sqlite":
        return SQLiteStore(url, collection, dl, fields)
    if scheme in ("mongodb", "mongodb+srv"):
        return MongoStore(url, collection, dl, fields)
    raise ValueError(f"unknown store URL scheme {scheme!r}; supported: sqlite://, mongodb://")
