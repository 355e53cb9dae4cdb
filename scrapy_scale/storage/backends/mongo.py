"""The MongoDB item store: one collection, ``_id`` the item key, unordered bulk upserts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

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
        (permanent), StoreUnavailable (one line) when it cannot be reached within the
        timeout: a wrong host or a server not started yet stops the start, as an
        unreachable frontier does; an outage later in the crawl is waited out."""
        from pymongo import errors

        try:
            self._call(self._client_or_open().admin.command, "ping")
            self._call(self._items.find_one, {}, projection={"_id": 1})
        except StoreUnavailable as e:
            cause = e.__cause__ if e.__cause__ is not None else e
            # pymongo's text goes on with its timeouts and a whole topology description
            first = str(cause).split(" (configured timeouts")[0].split(", Timeout:")[0][:200]
            raise StoreUnavailable(
                f"cannot reach MongoDB at {self.describe()} within {self.timeout_ms / 1000:g} s"
                f" ({type(cause).__name__}: {first})"
            ) from None
        except errors.PyMongoError:
            return  # anything else shows at the first write, as before

    def _client_or_open(self) -> Any:
        if self._client is None:
            self.open()
        return self._client

    def write(self, rows: list[Row], now: float) -> WriteResult:
        from pymongo import errors

        res = WriteResult()
        if not rows:
            return res
        if self._client is None:
            self.open()
        ids = [i for r in rows for i in ids_to_read([r.key], r.doc.get(self.job_field))]
        found = self._call(lambda: list(self._items.find({"_id": {"$in": ids}}, {self.job_field: 1})))
        owners = {d["_id"]: d.get(self.job_field) for d in found}
        ops = [self._upsert(r, row_id(r.key, r.doc.get(self.job_field), owners), now) for r in rows]
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

    def _upsert(self, r: Row, target: str, now: float) -> Any:
        """The upsert of ``r`` at ``target``; it matches only a row of the same job (or of
        none), so a row another job wrote between the read and this write makes it a duplicate
        key error (retried, and placed again) instead of taking that job's row."""
        from pymongo import UpdateOne

        where: dict[str, Any] = {"_id": target}
        job = r.doc.get(self.job_field)
        if job:
            where[self.job_field] = {"$in": [job, None]}
        return UpdateOne(
            where, {"$set": {**r.doc, self.last_seen: now}, "$setOnInsert": {self.first_seen: now}}, upsert=True
        )

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

    def get_many(self, keys: list[str], job: str | None = None) -> dict[str, dict[str, Any]]:
        if self._client is None:
            self.open()
        docs = self._call(lambda: list(self._items.find({"_id": {"$in": ids_to_read(keys, job)}})))
        by_id = {d.pop("_id"): d for d in docs}
        return pick_job_docs(keys, job, by_id, self.job_field) if job else by_id

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
