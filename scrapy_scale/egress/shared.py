"""The pool's shared, persisted state: health records, per-worker counts, live workers.

With a Redis frontier (``SCALE_FRONTIER_URL=redis://...``) the state is in the same
Redis, shared by every worker of the job; otherwise in ``egress.db`` (SQLite) next to
the frontier file, local and persisted. Either way it survives restarts.

Write rate: a worker never writes per request. Every ``SCALE_EGRESS_SYNC`` seconds it
sends one batch (one Redis pipeline, one SQLite transaction): the health records that
changed since the last sync in one ``HSET``, its cumulative counts in one field, its
heartbeat; and reads the job's health records back to merge other workers' state
changes. That is five Redis commands per worker per sync whatever the request rate.

Redis keys (hash-tagged per job like the frontier's)::

    scale:{J}:egress:health   HASH  key (egress id, or "id|domain") -> JSON health record
    scale:{J}:egress:counts   HASH  worker -> JSON counts (requests, failures, bans, routes)
    scale:{J}:egress:live     HASH  worker -> last sync (epoch s)
    scale:{J}:egress:pool     HASH  egress id -> JSON {"group": ...} (the configured pool)

Nothing here holds a proxy URL: records are keyed by egress id.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale.egress.health import Health, HealthRecord
from scrapy_scale.redact import redact_url
from scrapy_scale.shared_values import Warnings, decode_hash, is_wrongtype
from scrapy_scale.sqlite_open import setup_retrying

logger = logging.getLogger("scrapy_scale.egress.middleware")  # the lines users know, under their logger

#: a worker that has not synced for this many sync periods (plus 5 s) is not live
LIVE_PERIODS = 3


class StateStore:
    where = ""
    #: SCALE_EGRESS_QUARANTINE_MAX: a stored time later than now + this is not believed
    longest = 3600.0

    def load(self) -> dict[str, dict[str, Any]]:
        raise NotImplementedError

    def sync(
        self, worker: str, dirty: dict[str, HealthRecord], counts: dict[str, Any], now: float
    ) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
        """Write this worker's changes; (every health record, last sync per worker as
        stored: check it with :func:`clean_live`)."""
        raise NotImplementedError

    def set_pool(self, members: dict[str, str | None]) -> None:
        raise NotImplementedError

    def read_all(self) -> dict[str, Any]:
        """health, counts (per worker), live, pool: what ``scrapy scale egress`` shows."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget the job's pool state (health, counts, workers, members)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def _loads(raw: dict[Any, Any]) -> dict[str, Any]:
    """Stored JSON values by key, through the one decoder of shared values
    (:func:`scrapy_scale.shared_values.decode_hash`: not UTF-8, not JSON, nested too deep
    or too large is refused); a refused one is None (its reader skips it with a warning:
    shared state is untrusted input), under its name as shown when the name is refused."""
    good, bad = decode_hash(raw)
    for key, _ in bad:
        good.setdefault(key, None)
    return good


#: HSET of health records that keeps a newer state change: a record is written unless the
#: stored one has a later ``c`` (another worker quarantined or restored it since). A stored
#: record that would not decode (:meth:`Health.from_record`: a field that is not a finite
#: number, a time after ARGV[1] = now + SCALE_EGRESS_QUARANTINE_MAX) holds nothing and is
#: overwritten, as :func:`newer` does: its ``c`` must not win every merge for ever.
_PUT_HEALTH = """
local limit = tonumber(ARGV[1])
local function valid(o)
  for _, k in ipairs({'g', 'b', 'at', 'u', 'l', 'c', 'r'}) do
    local v = o[k]
    if v ~= nil and v ~= cjson.null then
      if type(v) ~= 'number' or v ~= v or v == math.huge or v == -math.huge then return false end
      if (k == 'at' or k == 'c' or k == 'r') and v > limit then return false end
    end
  end
  return true
end
for i = 2, #ARGV, 2 do
  local old = redis.call('HGET', KEYS[1], ARGV[i])
  local keep = false
  if old then
    local ok, o = pcall(cjson.decode, old)
    local ok2, n = pcall(cjson.decode, ARGV[i + 1])
    if ok and ok2 and type(o) == 'table' and type(n) == 'table' and valid(o) then
      local oc = o.c
      if type(oc) ~= 'number' then oc = 0 end
      keep = oc > (tonumber(n.c) or 0)
    end
  end
  if not keep then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 0
"""


def newer(old: Any, new: dict[str, Any], now: float, longest: float) -> bool:
    """Does ``old`` (stored) hold a later state change than ``new``? A stored record that
    does not decode (:meth:`Health.from_record` with ``now`` and ``longest``, the
    SCALE_EGRESS_QUARANTINE_MAX) holds nothing: it is overwritten, or its far-future or
    non-numeric ``c`` would keep every newer record out for ever."""
    try:
        kept = Health.from_record(old, now, longest)
        return kept.changed > float(new.get("c", 0) or 0)
    except (TypeError, ValueError, OverflowError):
        return False


class RedisState(StateStore):
    def __init__(self, url: str, job: str, client: Any = None):
        self.url, self.where = url, redact_url(url)
        self._r: Any = None
        self._opening = threading.Lock()
        p = f"scale:{{{job}}}:egress"
        self.k_health, self.k_counts, self.k_live, self.k_pool = (
            f"{p}:{s}" for s in ("health", "counts", "live", "pool")
        )
        self.warnings = Warnings(logger)
        if client is not None:
            self._adopt(client)

    @property
    def r(self) -> Any:
        """The client, opened at its first use, in the thread that uses it: opening asks the
        node whether it is a Cluster, and a Redis down when the spider opens must not stop
        the sync loop from starting (each sync tries again, and says so once)."""
        if self._r is None:
            from scrapy_scale.redis_open import open_redis

            with self._opening:
                if self._r is None:
                    self._adopt(open_redis(self.url, socket_timeout=10, socket_connect_timeout=10))
        return self._r

    def _adopt(self, client: Any) -> None:
        from scrapy_scale.redis_open import is_cluster

        #: a Cluster's pipeline cannot load a script a node lacks (NOSCRIPT): the script is called alone
        self._script_in_pipe = not is_cluster(client)
        self._put_health = client.register_script(_PUT_HEALTH)
        self._r = client

    @property
    def script_in_pipeline(self) -> bool:
        """A sync calls the health script inside its pipeline (not on a Redis Cluster: its
        pipeline cannot load a script a node lacks); opens the client when not open yet."""
        _ = self.r
        return self._script_in_pipe

    def _retyped(self, op: Callable[[], Any]) -> Any:
        """``op``; when a key of the job's pool state holds another type (WRONGTYPE: a
        string where a hash should be), that key holds nothing a worker wrote: it is
        deleted, said once, and ``op`` runs again. The sync must not stop for the whole
        crawl over it (issue 35 item 6)."""
        import redis

        try:
            return op()
        except redis.ResponseError as e:
            if not is_wrongtype(e):
                raise
        for k in (self.k_health, self.k_counts, self.k_live, self.k_pool):
            if self.r.type(k) not in (b"hash", b"none", "hash", "none"):
                self.warnings.warn(
                    k, "type", "egress: shared state key %s is not a hash; deleted (shared state is untrusted)", k
                )
                self.r.delete(k)
        return op()

    def _hgetall(self, key: str) -> dict[str, Any]:
        """A hash of the job's pool state for a reader that writes nothing: a key of another
        type reads as empty (the crawl deletes it)."""
        import redis

        try:
            return _loads(self.r.hgetall(key))
        except redis.ResponseError as e:
            if not is_wrongtype(e):
                raise
            return {}

    def load(self) -> dict[str, dict[str, Any]]:
        return _loads(self._retyped(lambda: self.r.hgetall(self.k_health)))

    def sync(self, worker, dirty, counts, now):
        return self._retyped(lambda: self._sync(worker, dirty, counts, now))

    def _sync(self, worker: str, dirty: dict[str, Any], counts: dict[str, Any], now: float) -> Any:
        pipe = self.r.pipeline(transaction=False)
        if dirty:
            args = [repr(float(now + self.longest))]
            args += [x for k, v in dirty.items() for x in (k, json.dumps(v))]
            self._put_health(keys=[self.k_health], args=args, client=pipe if self._script_in_pipe else None)
        pipe.hset(self.k_counts, worker, json.dumps(counts))
        pipe.hset(self.k_live, worker, str(now))
        pipe.hgetall(self.k_health)
        pipe.hgetall(self.k_live)
        *_, health, live = pipe.execute()
        return _loads(health), _loads(live)

    def set_pool(self, members):
        pipe = self.r.pipeline(transaction=False)
        pipe.delete(self.k_pool)
        if members:
            pipe.hset(self.k_pool, mapping={e: json.dumps({"group": g}) for e, g in members.items()})
        pipe.execute()

    def read_all(self):
        return {
            "health": self._hgetall(self.k_health),
            "counts": self._hgetall(self.k_counts),
            "live": self._hgetall(self.k_live),
            "pool": self._hgetall(self.k_pool),
        }

    def reset(self) -> None:
        self.r.delete(self.k_health, self.k_counts, self.k_live, self.k_pool)

    def close(self) -> None:
        self.r.close()


def _setup_tables(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode=WAL")
    for t in ("health", "counts", "live", "pool"):
        db.execute(f"CREATE TABLE IF NOT EXISTS egress_{t} (job TEXT, k TEXT, v TEXT, PRIMARY KEY (job, k))")


class SqliteState(StateStore):
    def __init__(self, path: str, job: str):
        self.path, self.job, self.where = path, job, path
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
        setup_retrying(self.db, _setup_tables, 30)

    def _all(self, table: str) -> dict[str, Any]:
        rows = self.db.execute(f"SELECT k, v FROM egress_{table} WHERE job = ?", (self.job,)).fetchall()
        return _loads(dict(rows))

    def _put(self, table: str, items: dict[str, Any]) -> None:
        self.db.executemany(
            f"INSERT OR REPLACE INTO egress_{table} (job, k, v) VALUES (?, ?, ?)",
            [(self.job, k, json.dumps(v)) for k, v in items.items()],
        )

    def load(self):
        return self._all("health")

    def sync(self, worker, dirty, counts, now):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            stored = self._all("health") if dirty else {}
            self._put("health", {k: v for k, v in dirty.items() if not newer(stored.get(k), v, now, self.longest)})
            self._put("counts", {worker: counts})
            self._put("live", {worker: now})
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return self._all("health"), self._all("live")

    def set_pool(self, members):
        self.db.execute("DELETE FROM egress_pool WHERE job = ?", (self.job,))
        self._put("pool", {e: {"group": g} for e, g in members.items()})

    def read_all(self):
        return {t: self._all(t) for t in ("health", "counts", "live", "pool")}

    def reset(self) -> None:
        for t in ("health", "counts", "live", "pool"):
            self.db.execute(f"DELETE FROM egress_{t} WHERE job = ?", (self.job,))

    def close(self) -> None:
        self.db.close()


def open_state(settings: Any, job: str) -> StateStore:
    """The state store for a crawl (or a command) with these settings."""
    from scrapy_scale.egress.settings import QUARANTINE_MAX
    from scrapy_scale.frontier import settings as frontier_settings

    url = frontier_settings.URL.get(settings) or ""
    scheme = urlsplit(url).scheme
    store: StateStore = (
        RedisState(url, job) if scheme in ("redis", "rediss") else SqliteState(state_path(settings), job)
    )
    store.longest = QUARANTINE_MAX.get(settings)
    return store


def sqlite_exists(settings: Any) -> bool:
    """False when the state would be a SQLite file that does not exist (yet)."""
    from scrapy_scale.frontier import settings as frontier_settings

    if urlsplit(frontier_settings.URL.get(settings) or "").scheme in ("redis", "rediss"):
        return True
    return os.path.exists(state_path(settings))


def forget_job(settings: Any, job: str) -> None:
    """Forget ``job``'s stored pool state (``scrapy scale reset``); nothing to do without any."""
    if not sqlite_exists(settings):
        return
    store = open_state(settings, job)
    try:
        store.reset()
    finally:
        store.close()


def state_path(settings: Any) -> str:
    """``egress.db`` next to the SQLite frontier (under ``JOBDIR`` / ``SCALE_STATE_DIR``)."""
    from scrapy_scale.frontier import settings as frontier_settings

    url = frontier_settings.URL.get(settings) or ""
    if urlsplit(url).scheme == "sqlite":
        parts = urlsplit(url)
        path = (parts.netloc or "") + parts.path
        if path.startswith("//"):
            path = path[1:]
        if path not in ("", "/"):
            return os.path.join(os.path.dirname(path) or ".", "egress.db")
    from scrapy_scale.config.core_settings import state_file_url

    return state_file_url(settings, "egress.db")[len("sqlite:///") :]


#: a worker's last sync more than this far ahead of this worker's clock is not believed
CLOCK_SKEW = 3600.0


def clean_live(live: dict[str, Any], now: float) -> tuple[dict[str, float], list[str]]:
    """The workers' last syncs that are finite numbers not far ahead of ``now``; and the
    workers whose value was skipped (shared state is untrusted input)."""
    out: dict[str, float] = {}
    bad: list[str] = []
    for worker, v in live.items():
        try:
            t = float(v) if not isinstance(v, bool) else math.nan
        except (TypeError, ValueError, OverflowError):
            t = math.nan
        if math.isfinite(t) and t <= now + CLOCK_SKEW:
            out[worker] = t
        else:
            bad.append(worker)
    return out, bad


def live_workers(live: dict[str, float], now: float, sync: float) -> int:
    return max(1, sum(1 for t in live.values() if now - t <= LIVE_PERIODS * sync + 5))


__all__ = ["RedisState", "SqliteState", "StateStore", "clean_live", "live_workers", "open_state", "state_path"]
