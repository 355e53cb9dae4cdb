"""The item store interface: the rows, the write result, the errors and the
abstract :class:`Store` every backend implements (it imports no backend)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.errors import ItemNotStored
from scrapy_scale.redact import redact_url
from scrapy_scale.storage.layout import META_FIELDS


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


#: between an item key and its job in the id of a row whose key another job already holds
JOB_SEP = "@"


def job_key(key: str, job: str) -> str:
    """The id of ``job``'s row of ``key`` when another job holds ``key`` in the same table
    (job names and item keys never hold ``@``)."""
    return f"{key}{JOB_SEP}{job}"


def row_id(key: str, job: str | None, owners: Mapping[str, Any]) -> str:
    """Where ``job``'s item of ``key`` is stored, given ``owners`` (stored id -> the job its
    row names, None when it names none) for the ids ``key`` and ``job_key(key, job)``: the
    job's own row of ``key@job`` when there is one, else ``key`` when that is free or the
    job's (or a row naming no job), else ``key@job``. A row is never given to another job."""
    if not job:
        return key
    scoped = job_key(key, job)
    if scoped in owners:
        return scoped
    if key not in owners or owners[key] in (None, job):
        return key
    return scoped


def ids_to_read(keys: list[str], job: str | None) -> list[str]:
    """The stored ids :func:`row_id` needs to know the owners of."""
    return keys + [job_key(k, job) for k in keys] if job else list(keys)


def pick_job_docs(
    keys: list[str], job: str | None, docs: Mapping[str, dict[str, Any]], job_field: str
) -> dict[str, dict[str, Any]]:
    """key -> ``job``'s document among ``docs`` (stored id -> document), as :func:`row_id` places it."""
    out: dict[str, dict[str, Any]] = {}
    owners = {i: d.get(job_field) for i, d in docs.items()}
    for k in keys:
        i = row_id(k, job, owners)
        if i in docs and (not job or owners[i] in (None, job)):
            out[k] = docs[i]
    return out


class Store:
    """Base class of the backends.

    Several jobs may share one table: a row belongs to the job its ``_job`` field names and
    is never rewritten by another. A job's item is stored under its key, or under
    ``<key>@<job>`` when another job's row already holds that key (see :func:`row_id`)."""

    url: str

    def __init__(self, collection: str, dead_letter: str, fields: Mapping[str, str] | None = None):
        self.collection = collection
        self.dead_collection = dead_letter
        self.fields = dict(fields or META_FIELDS)
        self.first_seen = self.fields["first_seen"]
        self.last_seen = self.fields["last_seen"]
        self.job_field = self.fields["job"]

    def open(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def write(self, rows: list[Row], now: float) -> WriteResult:  # pragma: no cover
        raise NotImplementedError

    def dead_letter(self, rows: list[DeadRow], now: float) -> None:  # pragma: no cover
        raise NotImplementedError

    def get(self, key: str) -> dict[str, Any] | None:  # pragma: no cover
        raise NotImplementedError

    def get_many(self, keys: list[str], job: str | None = None) -> dict[str, dict[str, Any]]:
        """key -> document (as :meth:`get` gives it) of the ``keys`` the store has, in one
        round trip per few hundred keys; with ``job``, that job's documents only (wherever
        :func:`row_id` put them)."""
        raise NotImplementedError  # pragma: no cover

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
