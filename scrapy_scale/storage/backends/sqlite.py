"""The SQLite item store: one file, WAL, every batch one committed transaction."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from scrapy_scale.shared_values import Refused, Warnings, loads
from scrapy_scale.sqlite_open import setup_retrying
from scrapy_scale.storage.backends.base import (
    DeadRow,
    Row,
    Store,
    StoreBroken,
    StoreUnavailable,
    WriteResult,
    ids_to_read,
    pick_job_docs,
    row_id,
)
from scrapy_scale.storage.encode import to_json
from scrapy_scale.storage.layout import sqlite_path

logger = logging.getLogger(__name__)
#: one warning per table and kind for rows read back that are not JSON objects
warnings = Warnings(logger)

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
        self._warned_bad_row = False

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
            old: dict[str, dict[str, Any]] = {}
            ids = [i for r in rows for i in ids_to_read([r.key], r.doc.get(self.job_field))]
            for i in range(0, len(ids), self.CHUNK):
                chunk = ids[i : i + self.CHUNK]
                q = f'SELECT key, doc FROM "{self.collection}" WHERE key IN ({",".join("?" * len(chunk))})'
                old.update((k, self._stored_doc(k, d)) for k, d in c.execute(q, chunk).fetchall())
            owners = {k: d.get(self.job_field) for k, d in old.items()}
            out = []
            for r in rows:
                target = row_id(r.key, r.doc.get(self.job_field), owners)
                prev = old.get(target)
                if prev is None:
                    doc = dict(r.doc)
                    doc[self.first_seen] = now
                    res.inserted.append(r.key)
                else:
                    doc = dict(prev)
                    doc.update(r.doc)
                    doc.setdefault(self.first_seen, now)
                    res.updated.append(r.key)
                doc[self.last_seen] = now
                out.append((target, to_json(doc)))
            c.executemany(f'INSERT OR REPLACE INTO "{self.collection}" (key, doc) VALUES (?, ?)', out)
        return res

    def _stored_doc(self, key: str, text: str) -> dict[str, Any]:
        """A stored row's document as a write reads it: a row that is not a JSON object (written
        by something else) is read as an empty one, so the write replaces it, with one warning."""
        try:
            doc = json.loads(text)
        except (TypeError, ValueError):
            doc = None
        if isinstance(doc, dict):
            return doc
        if not self._warned_bad_row:
            self._warned_bad_row = True
            logger.warning(
                "item store %s: row %r of %s is not a JSON object (%.40r); the item's write replaces it",
                self.describe(),
                key,
                self.collection,
                text,
            )
        return {}

    def dead_letter(self, rows: list[DeadRow], now: float) -> None:
        if not rows:
            return
        with self._transaction() as c:
            c.executemany(
                f'INSERT OR REPLACE INTO "{self.dead_collection}" (id, doc, at) VALUES (?, ?, ?)',
                [(r.id, to_json(r.doc), now) for r in rows],
            )

    def _doc(self, table: str, key: Any, raw: Any) -> dict[str, Any] | None:
        """A row's document read back (another program may have written it): a JSON object,
        else None with one warning per table (shared_values: size, depth, UTF-8 checked)."""
        try:
            doc = loads(raw)
        except Refused as e:
            why = str(e)
        else:
            if isinstance(doc, dict):
                return doc
            why = f"a JSON {type(doc).__name__}, not an object"
        warnings.warn(
            f"{self.path} {table}",
            "row",
            "item store %s: skipping unreadable row %r of %s (%s); shared state is untrusted",
            self.describe(),
            str(key)[:60],
            table,
            why,
        )
        return None

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self.conn.execute(f'SELECT doc FROM "{self.collection}" WHERE key = ?', (key,)).fetchone()
        return None if row is None else self._doc(self.collection, key, row[0])

    def get_many(self, keys: list[str], job: str | None = None) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        ids = ids_to_read(keys, job)
        for i in range(0, len(ids), 500):  # under SQLite's limit of bound parameters
            chunk = ids[i : i + 500]
            sql = f'SELECT key, doc FROM "{self.collection}" WHERE key IN ({",".join("?" * len(chunk))})'
            with self._lock:
                rows = self.conn.execute(sql, chunk).fetchall()
            out.update((k, d) for k, doc in rows if (d := self._doc(self.collection, k, doc)) is not None)
        return pick_job_docs(keys, job, out, self.job_field) if job else out

    def documents(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            rows = self.conn.execute(f'SELECT key, doc FROM "{self.collection}" ORDER BY key').fetchall()
        for key, doc in rows:
            d = self._doc(self.collection, key, doc)
            if d is not None:
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
            d = self._doc(self.dead_collection, id_, doc)
            if d is not None:
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
