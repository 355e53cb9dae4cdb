"""The SQLite frontier backend: :class:`.store.SqliteStore`, one file for every job, over
the units it owns (:mod:`.file`, :mod:`.runs`, :mod:`.records`, :mod:`.leases`, :mod:`.reads`)."""

from __future__ import annotations

from scrapy_scale.frontier.backends.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
