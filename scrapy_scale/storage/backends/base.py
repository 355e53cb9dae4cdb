"""The item store interface: the rows, the write result, the errors and the
abstract :class:`Store` every backend implements (it imports no backend)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.errors import ItemNotStored
from scrapy_scale.redact import redact_url
from scrapy_scale.storage.settings import META_FIELDS


class StoreUnavailable(ItemNotStored):
    """The store cannot be reached right now; try the same write again later."""


class StoreBroken(ItemNotStored):
    """The store answers but can never take a write as it is (schema mismatch, corrupt
    file): retrying or dead-lettering item after item cannot help; the crawl must stop."""


@dataclass
class Row:
    key: str
    doc: dict[str, Any]


@dataclass
class DeadRow:
    id: str
    doc: dict[str, Any]


@dataclass
class WriteResult:
    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    retry: list[Row] = field(default_factory=list)


class Store:
    """Base class of the backends."""

    url: str

    def __init__(self, collection: str, dead_letter: str, fields: Mapping[str, str] | None = None):
        self.collection = collection
        self.dead_collection = dead_letter
        self.fields = dict(fields or META_FIELDS)
        self.first_seen = self.fields["first_seen"]
        self.last_seen = self.fields["last_seen"]

    def open(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def write(self, rows: list[Row], now: float) -> WriteResult:  # pragma: no cover
        raise NotImplementedError

    def dead_letter(self, rows: list[DeadRow], now: float) -> None:  # pragma: no cover
        raise NotImplementedError

    def get(self, key: str) -> dict[str, Any] | None:  # pragma: no cover
        raise NotImplementedError

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """key -> document (as :meth:`get` gives it) of the ``keys`` the store has, in one
        round trip per few hundred keys."""
        return {k: d for k in keys if (d := self.get(k)) is not None}  # pragma: no cover

    def documents(self) -> Iterator[dict[str, Any]]:  # pragma: no cover
        raise NotImplementedError

    def count(self) -> int:  # pragma: no cover
        raise NotImplementedError

    def dead_letters(self) -> list[dict[str, Any]]:  # pragma: no cover
        raise NotImplementedError

    def delete_dead_letters(self, ids: list[str]) -> None:  # pragma: no cover
        """Remove dead-letter records by id (a store whose dead-letter collection is another
        side collection, such as the quality history, prunes it with this)."""
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def describe(self) -> str:
        """The store's URL without credentials (safe to log)."""
        return redact_url(self.url)
