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

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale.errors import ItemNotStored
from scrapy_scale.redact import redact_url
from scrapy_scale.sqlite_open import setup_retrying
from scrapy_scale.storage.encode import to_json
from scrapy_scale.storage.settings import META_FIELDS


class StoreUnavailable(ItemNotStored):
    """The store cannot be reached right now; try the same write again later."""


class StoreBroken(ItemNotStored):
    """The store answers but can never take a write as it is (schema mismatch, corrupt
    file): retrying or dead-lettering item after item cannot help; the crawl must stop."""


#: SQLite errors that may pass: another writer holds the lock, I/O trouble, file not there yet
SQLITE_TRANSIENT = ("locked", "busy", "disk i/o", "unable to open", "disk is full", "interrupted")


def sqlite_error(path: str, e: sqlite3.Error) -> Exception:
    """What a SQLite error means for the caller: a transient OperationalError becomes
    StoreUnavailable (try again); any other OperationalError/DatabaseError (no such table or
    column, not a database, malformed, readonly) StoreBroken; IntegrityError, InterfaceError,
    DataError and ProgrammingError are about the rows written and stay as they are (the writer
    isolates the row and dead-letters it)."""
    if isinstance(e, (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.DataError, sqlite3.ProgrammingError)):
        return e
    msg = str(e)
    if isinstance(e, sqlite3.OperationalError) and any(t in msg.lower() for t in SQLITE_TRANSIENT):
        return StoreUnavailable(f"sqlite {path}: {msg}")
    if isinstance(e, sqlite3.DatabaseError):
        return StoreBroken(f"sqlite {path}: {type(e).__name__}: {msg}")
    return e


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


# ---- SQLite ------------------------------------------------------------------------


def sqlite_path(url: str) -> str:
    """As the frontier reads its URL: ``sqlite:///abs/path`` (or ``sqlite:////abs/path``) is
    absolute, ``sqlite://rel/path`` relative to the working directory."""
    parts = urlsplit(url)
    path = (parts.netloc or "") + parts.path
    if path.startswith("//"):
        path = path[1:]
    if path in ("", "/"):
        raise ValueError(f"no file in {url!r}; use sqlite:///path/to/items.sqlite")
    return path


class SQLiteStore(Store):
    """One SQLite file (WAL; every batch is one committed transaction, synchronous=FULL).

    Table ``<collection>(key TEXT PRIMARY KEY, doc TEXT)``: ``doc`` is the JSON document.
    Several processes may share the file: each batch runs under ``BEGIN IMMEDIATE``.
    """

    CHUNK = 500

    def __init__(self, url: str, collection: str, dead_letter: str, fields: Mapping[str, str] | None = None):
        super().__init__(collection, dead_letter, fields)
        self.url = url
        self.path = sqlite_path(url)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    def open(self) -> None:
        with self._lock:
            if self._conn is not None:
                return
            d = os.path.dirname(self.path)
            if d:
                os.makedirs(d, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            try:
                setup_retrying(conn, self._setup, 30)
            except sqlite3.Error as e:
                conn.close()
                raise sqlite_error(self.path, e) from e
            self._conn = conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{self.collection}" (key TEXT PRIMARY KEY, doc TEXT NOT NULL)')
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{self.dead_collection}" '
            "(id TEXT PRIMARY KEY, doc TEXT NOT NULL, at REAL NOT NULL)"
        )
        # a table made by something else must fail now, not at the first write
        conn.execute(f'SELECT key, doc FROM "{self.collection}" LIMIT 0')
        conn.execute(f'SELECT id, doc, at FROM "{self.dead_collection}" LIMIT 0')

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self.open()
        assert self._conn is not None
        return self._conn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One committed write transaction; errors are classified by :func:`sqlite_error`
        (locked/busy/I/O: StoreUnavailable, the same batch can be tried again)."""
        with self._lock:
            c = self.conn
            try:
                c.execute("BEGIN IMMEDIATE")
                try:
                    yield c
                    c.execute("COMMIT")
                except BaseException:
                    if c.in_transaction:
                        c.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                err = sqlite_error(self.path, e)
                if err is e:
                    raise
                raise err from e

    def write(self, rows: list[Row], now: float) -> WriteResult:
        res = WriteResult()
        if not rows:
            return res
        with self._transaction() as c:
            old: dict[str, str] = {}
            keys = [r.key for r in rows]
            for i in range(0, len(keys), self.CHUNK):
                chunk = keys[i : i + self.CHUNK]
                q = f'SELECT key, doc FROM "{self.collection}" WHERE key IN ({",".join("?" * len(chunk))})'
                old.update(c.execute(q, chunk).fetchall())
            out = []
            for r in rows:
                prev = old.get(r.key)
                if prev is None:
                    doc = dict(r.doc)
                    doc[self.first_seen] = now
                    res.inserted.append(r.key)
                else:
                    doc = json.loads(prev)
                    doc.update(r.doc)
                    doc.setdefault(self.first_seen, now)
                    res.updated.append(r.key)
                doc[self.last_seen] = now
                out.append((r.key, to_json(doc)))
            c.executemany(f'INSERT OR REPLACE INTO "{self.collection}" (key, doc) VALUES (?, ?)', out)
        return res

    def dead_letter(self, rows: list[DeadRow], now: float) -> None:
        if not rows:
            return
        with self._transaction() as c:
            c.executemany(
                f'INSERT OR REPLACE INTO "{self.dead_collection}" (id, doc, at) VALUES (?, ?, ?)',
                [(r.id, to_json(r.doc), now) for r in rows],
            )

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self.conn.execute(f'SELECT doc FROM "{self.collection}" WHERE key = ?', (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):  # under SQLite's limit of bound parameters
            chunk = keys[i : i + 500]
            sql = f'SELECT key, doc FROM "{self.collection}" WHERE key IN ({",".join("?" * len(chunk))})'
            with self._lock:
                rows = self.conn.execute(sql, chunk).fetchall()
            out.update((k, json.loads(doc)) for k, doc in rows)
        return out

    def documents(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            rows = self.conn.execute(f'SELECT key, doc FROM "{self.collection}" ORDER BY key').fetchall()
        for key, doc in rows:
            d = json.loads(doc)
            d["_id"] = key
            yield d

    def count(self) -> int:
        with self._lock:
            return int(self.conn.execute(f'SELECT COUNT(*) FROM "{self.collection}"').fetchone()[0])

    def dead_letters(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self.conn.execute(f'SELECT id, doc, at FROM "{self.dead_collection}" ORDER BY at, id').fetchall()
        out = []
        for id_, doc, at in rows:
            d = json.loads(doc)
            d.update(_id=id_, at=at)
            out.append(d)
        return out

    def delete_dead_letters(self, ids: list[str]) -> None:
        if not ids:
            return
        with self._transaction() as c:
            c.executemany(f'DELETE FROM "{self.dead_collection}" WHERE id = ?', [(i,) for i in ids])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# ---- MongoDB -----------------------------------------------------------------------


class MongoStore(Store):
    """A MongoDB collection; ``_id`` is the item key. Unordered ``bulk_write`` of upserts."""

    DEFAULT_DB = "scrapy_scale"

    def __init__(
        self,
        url: str,
        collection: str,
        dead_letter: str,
        fields: Mapping[str, str] | None = None,
        timeout_ms: int = 5000,
    ):
        super().__init__(collection, dead_letter, fields)
        self.url = url
        self.timeout_ms = timeout_ms
        self._client: Any = None

    def open(self) -> None:
        if self._client is not None:
            return
        import pymongo
        from pymongo import uri_parser

        opts = {k.lower() for k in uri_parser.parse_uri(self.url, validate=False).get("options", {})}
        kw: dict[str, Any] = {"appname": "scrapy-scale"}
        for name in ("serverSelectionTimeoutMS", "connectTimeoutMS"):
            if name.lower() not in opts:
                kw[name] = self.timeout_ms
        if not opts & {"w", "journal", "j"}:
            # acknowledged is not durable: without j a kill -9 of the server loses the
            # last writes it confirmed (measured with SecantusDB; mongod: up to 100 ms)
            kw["journal"] = True
        if "sockettimeoutms" not in opts:
            kw["socketTimeoutMS"] = max(30_000, self.timeout_ms)
        self._client = pymongo.MongoClient(self.url, **kw)
        db = self._client.get_default_database(default=self.DEFAULT_DB)
        self._items = db[self.collection]
        self._dead = db[self.dead_collection]

    def _call(self, fn: Any, *a: Any, **kw: Any) -> Any:
        from pymongo import errors

        if self._client is None:
            self.open()
        try:
            return fn(*a, **kw)
        except errors.BulkWriteError:
            raise
        except errors.PyMongoError as e:
            denied = access_denied(e)
            if denied:  # wrong credentials or missing rights: waiting cannot help
                raise StoreBroken(f"SCALE_STORE_URL: MongoDB at {self.describe()} {denied}") from e
            if isinstance(e, errors.ConnectionFailure | errors.WTimeoutError):
                raise StoreUnavailable(f"MongoDB: {type(e).__name__}: {str(e)[:300]}") from e
            code = getattr(e, "code", None)
            if (
                e.has_error_label("RetryableWriteError")
                or e.has_error_label("TransientTransactionError")
                or (isinstance(e, errors.OperationFailure) and code != 11000 and code in RETRYABLE_WRITE_CODES)
            ):
                raise StoreUnavailable(f"MongoDB: {type(e).__name__}: {str(e)[:300]}") from e
            raise

    def check_access(self) -> None:
        """At startup: authenticate (ping with the URL's credentials) and read the items
        collection. Raises StoreBroken when the server refuses the credentials or the rights
        (permanent); a server that cannot be reached is left to the writer (an outage)."""
        from pymongo import errors

        try:
            self._call(self._client_or_open().admin.command, "ping")
            self._call(self._items.find_one, {}, projection={"_id": 1})
        except StoreUnavailable:
            return
        except errors.PyMongoError:
            return  # anything else shows at the first write, as before

    def _client_or_open(self) -> Any:
        if self._client is None:
            self.open()
        return self._client

    def write(self, rows: list[Row], now: float) -> WriteResult:
        from pymongo import UpdateOne, errors

        res = WriteResult()
        if not rows:
            return res
        ops = [
            UpdateOne(
                {"_id": r.key},
                {"$set": {**r.doc, self.last_seen: now}, "$setOnInsert": {self.first_seen: now}},
                upsert=True,
            )
            for r in rows
        ]
        if self._client is None:
            self.open()
        errs: dict[int, tuple[int, str]] = {}
        upserted: set[int]
        try:
            r = self._call(self._items.bulk_write, ops, ordered=False)
            upserted = set(r.upserted_ids or {})
        except errors.BulkWriteError as e:
            d = e.details
            if d.get("writeConcernErrors"):
                raise StoreUnavailable(f"MongoDB write concern: {d['writeConcernErrors'][0].get('errmsg')}") from e
            upserted = {u["index"] for u in d.get("upserted", [])}
            errs = {w["index"]: (int(w.get("code", 0)), str(w.get("errmsg", ""))[:500]) for w in d["writeErrors"]}
        for i, row in enumerate(rows):
            if i in errs:
                code, msg = errs[i]
                if code in RETRYABLE_WRITE_CODES:
                    res.retry.append(row)
                else:
                    res.failed[row.key] = f"MongoDB refused the write (code {code}): {msg}"
            elif i in upserted:
                res.inserted.append(row.key)
            else:
                res.updated.append(row.key)
        return res

    def dead_letter(self, rows: list[DeadRow], now: float) -> None:
        from pymongo import UpdateOne, errors

        if not rows:
            return
        if self._client is None:
            self.open()
        ops = [UpdateOne({"_id": r.id}, {"$set": r.doc, "$setOnInsert": {"at": now}}, upsert=True) for r in rows]
        try:
            self._call(self._dead.bulk_write, ops, ordered=False)
        except errors.BulkWriteError as e:
            d = e.details
            codes = {int(w.get("code", 0)) for w in d.get("writeErrors", [])}
            if d.get("writeConcernErrors") or (codes and codes <= RETRYABLE_WRITE_CODES):
                raise StoreUnavailable(f"MongoDB dead letter write failed: {str(d)[:300]}") from e
            raise StoreBroken(f"MongoDB refused the dead letter write: {str(d)[:300]}") from e

    def get(self, key: str) -> dict[str, Any] | None:
        if self._client is None:
            self.open()
        doc = self._call(self._items.find_one, {"_id": key})
        if doc is not None:
            doc.pop("_id", None)
        return doc

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        if self._client is None:
            self.open()
        docs = self._call(lambda: list(self._items.find({"_id": {"$in": keys}})))
        return {d.pop("_id"): d for d in docs}

    def documents(self) -> Iterator[dict[str, Any]]:
        if self._client is None:
            self.open()
        yield from self._call(lambda: list(self._items.find({}).sort("_id", 1)))

    def count(self) -> int:
        if self._client is None:
            self.open()
        return int(self._call(self._items.count_documents, {}))

    def dead_letters(self) -> list[dict[str, Any]]:
        if self._client is None:
            self.open()
        return list(self._call(lambda: list(self._dead.find({}).sort([("at", 1), ("_id", 1)]))))

    def delete_dead_letters(self, ids: list[str]) -> None:
        if not ids:
            return
        if self._client is None:
            self.open()
        self._call(self._dead.delete_many, {"_id": {"$in": list(ids)}})

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


#: MongoDB's codes for refused credentials and missing rights
AUTH_CODES = {
    18: "refused the credentials (AuthenticationFailed)",
    13: "refused the rights (Unauthorized)",
    11: "refused the user (UserNotFound)",
}


def access_denied(e: Exception) -> str | None:
    """What a pymongo error says about access (wrong password, missing rights), or None.
    A client whose handshake authentication failed reports later calls as
    ServerSelectionTimeoutError quoting the server's 'authentication failed'."""
    code = getattr(e, "code", None)
    details = getattr(e, "details", None) or {}
    if code in AUTH_CODES:
        return f"{AUTH_CODES[code]}: {str(details.get('errmsg') or e)[:200]}"
    if type(e).__name__ == "ServerSelectionTimeoutError" and "authentication failed" in str(e).lower():
        return f"{AUTH_CODES[18]}: authentication failed"
    return None


#: write errors worth another try: duplicate key on a concurrent upsert of the same
#: _id, and the "not primary"/shutdown family seen during an election or restart
RETRYABLE_WRITE_CODES = frozenset({11000, 6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})


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
