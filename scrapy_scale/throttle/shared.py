"""What workers share about a site: the rate limiter (Redis) and learned delays (Redis or SQLite).

**The shared limiter** is GCRA (the generic cell rate algorithm) in one Lua script per
call, on the Redis server's clock (``TIME``), so no worker's clock matters. One key
per site holds its theoretical arrival time (TAT): constant memory, expiring when the
site goes quiet. ``acquire(site, interval)`` either grants a request now (and moves
the TAT to now + interval) or returns the seconds until the next allowed time, so a
worker sleeps exactly that long instead of polling. ``pause(site, seconds)`` moves the
TAT to now + seconds: a Retry-After pauses the site for every worker.

**Learned delays** are a small JSON document per site (:meth:`Pacing.export`), newest
wins. Redis: one hash per job; SQLite: one table in ``throttle.db``. A restarted or a
new worker starts from them.

Every method is synchronous and may block; the glue calls them off the reactor.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale.shared_values import Warnings, decode_hash, is_wrongtype
from scrapy_scale.sqlite_open import setup_retrying

logger = logging.getLogger("scrapy_scale.throttle")

#: the TAT read back: a value that is not a finite number counts as none (it is overwritten);
#: a key of another type (a hash...) would fail GET with WRONGTYPE: it is deleted, and none
READ_TAT = """
local function read_tat(key)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' and raw.err then
    redis.call('DEL', key)
    return 0
  end
  local tat = tonumber(raw or '0')
  if tat == nil or tat ~= tat or tat == math.huge or tat == -math.huge then
    return 0
  end
  return tat
end
"""

ACQUIRE = (
    READ_TAT
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local tat = read_tat(KEYS[1])
if tat - tolerance > now then
  local wait = tat - tolerance - now
  if wait > max_wait then
    redis.call('SET', KEYS[1], string.format('%.6f', now + max_wait), 'PX', math.ceil((max_wait + 60) * 1000))
  end
  return string.format('%.6f', wait)
end
if now > tat then
  tat = now
end
redis.call('SET', KEYS[1], string.format('%.6f', tat + interval), 'PX', math.ceil((interval + 60) * 1000))
return '0'
"""
)

PAUSE = (
    READ_TAT
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = read_tat(KEYS[1])
local want = now + tonumber(ARGV[1])
if want > tat then
  redis.call('SET', KEYS[1], string.format('%.6f', want), 'PX', math.ceil((tonumber(ARGV[1]) + 60) * 1000))
  tat = want
end
return string.format('%.6f', tat - now)
"""
)


def _key_part(site: str) -> str:
    return site.replace("{", "%7B").replace("}", "%7D")


class RedisShared:
    """The shared limiter and learned delays of one job on Redis."""

    shared_limiter = True

    def __init__(self, url: str, job: str):
        self.url = url
        self._client: Any = None
        self._opening = threading.Lock()
        self.prefix = f"scale:{{{job}}}:throttle:"
        self.learned_key = self.prefix + "learned"
        self.warnings = Warnings(logger)

    @property
    def client(self) -> Any:
        """The client, opened at its first use (opening asks the node whether it is a
        Cluster): a Redis down when the spider opens leaves the shared limiter on, each
        call trying again, instead of pacing this worker alone for the whole crawl."""
        if self._client is None:
            from scrapy_scale.redis_open import open_redis

            with self._opening:
                if self._client is None:
                    client = open_redis(self.url, socket_timeout=5, socket_connect_timeout=5)
                    self._acquire = client.register_script(ACQUIRE)
                    self._pause = client.register_script(PAUSE)
                    self._client = client
        return self._client

    def rate_key(self, site: str) -> str:
        return f"{self.prefix}rate:{_key_part(site)}"

    def acquire(self, site: str, interval: float, tolerance: float = 0.0, max_wait: float = 86_400.0) -> float:
        """0.0: granted now; else seconds until the site's next allowed time. ``tolerance``:
        how early (seconds) a grant may come, so a caller that is late on one turn is not
        late on every later one (the average stays at the interval). A key further ahead
        than ``max_wait`` is brought back to now + ``max_wait``; the wait returned is the one
        found, so the caller can tell (and cap it). A key that is not a number is no key."""
        args = [f"{interval:.6f}", f"{tolerance:.6f}", f"{max_wait:.6f}"]
        self.client  # noqa: B018 - opened at its first use, with the scripts
        return float(self._acquire(keys=[self.rate_key(site)], args=args))

    def pause(self, site: str, seconds: float) -> float:
        """Pause the site for every worker; returns the seconds it is paused from now."""
        self.client  # noqa: B018 - opened at its first use, with the scripts
        return float(self._pause(keys=[self.rate_key(site)], args=[f"{seconds:.6f}"]))

    def load(self, repair: bool = True) -> dict[str, Any]:
        """The learned records by site; ``repair=False`` (a command that only reads): a key
        of another type reads as none and is left for a worker to delete."""
        if not repair:
            import redis

            try:
                raw = self.client.hgetall(self.learned_key)
            except redis.ResponseError as e:
                if not is_wrongtype(e):
                    raise
                raw = {}
            return _decode_all(raw, self.learned_key, self.warnings)
        raw = self._on_hash(lambda: self.client.hgetall(self.learned_key))
        return _decode_all(raw or {}, self.learned_key, self.warnings)

    def save(self, learned: Mapping[str, Mapping[str, Any]]) -> None:
        if learned:
            mapping: dict[Any, Any] = {k: json.dumps(v) for k, v in learned.items()}
            self._on_hash(lambda: self.client.hset(self.learned_key, mapping=mapping))

    def _on_hash(self, op: Callable[[], Any]) -> Any:
        """``op`` on the learned hash; a key of another type (WRONGTYPE: a string, a list
        where the hash should be) holds nothing this job wrote: it is deleted, said once,
        and ``op`` runs again (the shared limiter is not turned off by it)."""
        import redis

        try:
            return op()
        except redis.ResponseError as e:
            if not is_wrongtype(e):
                raise
            self.warnings.warn(
                self.learned_key,
                "type",
                "throttle: learned delays key %s is not a hash; deleted (shared state is untrusted)",
                self.learned_key,
            )
            self.client.delete(self.learned_key)
            return op()

    def reset(self) -> None:
        keys = list(self.client.scan_iter(match=self.prefix.replace("{", "\\{").replace("}", "\\}") + "*"))
        if keys:
            self.client.delete(*keys)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _setup_learned(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS learned (job TEXT NOT NULL, site TEXT NOT NULL, "
        "state TEXT NOT NULL, PRIMARY KEY (job, site))"
    )


class SqliteShared:
    """Learned delays of jobs on one machine, in a SQLite file (no shared limiter)."""

    shared_limiter = False

    def __init__(self, path: str, job: str):
        self.job = job
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()
        self.db = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
        setup_retrying(self.db, _setup_learned, 30)
        self.warnings = Warnings(logger)

    def acquire(
        self, site: str, interval: float, tolerance: float = 0.0, max_wait: float = 86_400.0
    ) -> float:  # pragma: no cover - never called
        raise NotImplementedError

    def pause(self, site: str, seconds: float) -> float:  # pragma: no cover - never called
        raise NotImplementedError

    def load(self, repair: bool = True) -> dict[str, Any]:
        with self._lock:
            rows = self.db.execute("SELECT site, state FROM learned WHERE job = ?", (self.job,)).fetchall()
        return _decode_all(dict(rows), f"throttle.db (job {self.job})", self.warnings)

    def save(self, learned: Mapping[str, Mapping[str, Any]]) -> None:
        if not learned:
            return
        with self._lock:
            self.db.executemany(
                "INSERT INTO learned (job, site, state) VALUES (?, ?, ?) "
                "ON CONFLICT (job, site) DO UPDATE SET state = excluded.state",
                [(self.job, k, json.dumps(v)) for k, v in learned.items()],
            )

    def reset(self) -> None:
        with self._lock:
            self.db.execute("DELETE FROM learned WHERE job = ?", (self.job,))

    def close(self) -> None:
        with self._lock:
            self.db.close()


def _decode_all(raw: Mapping[Any, Any], where: str, warnings: Warnings) -> dict[str, Any]:
    """The learned records read back, by site: a field whose name or value does not decode
    (not UTF-8, not JSON, JSON nested too deep: :mod:`scrapy_scale.shared_values`) is
    skipped with one warning, and the others are used. What a record holds is checked by
    :func:`scrapy_scale.throttle.learned.check_learned`."""
    good, bad = decode_hash(raw)
    warnings.refused(where, bad, "throttle: learned delays")
    return good


def sqlite_path(url: str) -> str:
    """``sqlite:///abs`` and ``sqlite:////abs`` are absolute, ``sqlite://rel`` relative."""
    path = url.split("://", 1)[1]
    return "/" + path.lstrip("/") if path.startswith("/") else path


def open_shared(url: str, job: str) -> RedisShared | SqliteShared:
    scheme = urlsplit(url).scheme
    if scheme in ("redis", "rediss"):
        return RedisShared(url, job)
    return SqliteShared(sqlite_path(url), job)
