"""The Redis frontier store: many workers, atomic Lua scripts, Cluster-safe keys.

Every key of a job starts with ``scale:{JOB}`` (the ``{JOB}`` hash tag puts a
job's keys in one Redis Cluster slot, so its scripts run on Cluster too). Keys of
one run live under ``scale:{JOB}:RUN:`` so starting a new run is one atomic
switch; the old run's keys are unlinked afterwards.

    scale:{J}:run            HASH  current run: id, started, ended
    scale:{J}:runs           HASH  run id -> JSON (history)
    scale:{J}:workers        HASH  worker id -> pid (claim_worker)
    scale:{J}:alive          HASH  worker id -> "last_beat until" (heartbeat; see redis_status)
    scale:{J}:seeds          LIST  JSON seeds pushed by feeders (RPUSH; see docs/frontier.md)
    scale:{J}:seeds:taken:W  LIST  seeds worker W took from the feed and has not written yet
    scale:{J}:seeds:takers   SET   workers with a taken list (back to the feed once not alive)
    scale:{J}:R:r:FP         HASH  one record: st d dom p a el enq fc fr o le t
    scale:{J}:R:prios        ZSET  priorities with ready work
    scale:{J}:R:dq:P         ZSET  domains with ready work at priority P, by last service
    scale:{J}:R:q:P:DOMAIN   LIST  ready fingerprints, FIFO (stale entries skipped at lease)
    scale:{J}:R:delayed      ZSET  delayed fingerprints by eligible time
    scale:{J}:R:leases       ZSET  leased fingerprints by lease expiry
    scale:{J}:R:wl:WORKER    SET   fingerprints leased by a worker
    scale:{J}:R:owners       SET   workers that leased in this run
    scale:{J}:R:failed:CLS   SET   failed fingerprints of a class
    scale:{J}:R:cnt          HASH  counters by state, fail:CLS, wait_sum, wait_n, served
    scale:{J}:R:dead/deadz   HASH/ZSET dead letters

Connection drops (a Redis restart) are retried with backoff for as long as
``retry_for`` allows (forever by default: the worker waits). Scripts are
idempotent under a retry: tokens make a repeated ack a no-op, a repeated enqueue
is a duplicate, and a lease whose reply was lost expires (it is not renewed).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier import lua, redis_status
from scrapy_scale.frontier.store import (
    COUNT_KEYS,
    DeadLetter,
    EnqueueResult,
    FrontierError,
    FrontierFatal,
    FrontierStore,
    Leased,
    NewRequest,
    RunInfo,
    State,
    Status,
)
from scrapy_scale.redact import redact_url

logger = logging.getLogger(__name__)
T = TypeVar("T")

_PRELUDE = lua.source("prelude")

_ENQUEUE = _PRELUDE + lua.source("enqueue")

_SEED = _PRELUDE + lua.source("seed")

_LEASE = _PRELUDE + lua.source("lease")

_RENEW = _PRELUDE + lua.source("renew")

_FINISH = _PRELUDE + lua.source("finish")

_RELEASE = _PRELUDE + lua.source("release")

_DEAD = _PRELUDE + lua.source("dead")

_RESOLVE = _PRELUDE + lua.source("resolve")

_REQUEUE = _PRELUDE + lua.source("requeue")

_RUN = lua.source("run")

_COUNTS = lua.source("counts")

_CLAIM = lua.source("claim")

_FEED = lua.source("feed")

#: seeds per call of the seed script (a call keeps Redis busy for about 2 ms)
SEED_CALL = 1000

_RETRYABLE: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)
try:  # a Cluster that is failing over or resharding
    from redis.exceptions import ClusterDownError, TryAgainError

    _RETRYABLE += (ClusterDownError, TryAgainError)
except ImportError:  # pragma: no cover
    pass


class RedisStore(FrontierStore):
    schemes = ("redis", "rediss")

    #: seconds to keep retrying when Redis is unreachable after open(); None = forever
    retry_for: float | None = None

    def __init__(self, url: str, job: str, clock: clock_mod.Clock = clock_mod.wall):
        super().__init__(job, clock)
        self.url = url
        self.key = f"scale:{{{job}}}"
        self._r: Any = None
        self._scripts: dict[str, Any] = {}
        self.sleep: Callable[[float], None] = time.sleep
        #: True when the URL points at a Redis Cluster node
        self.cluster = False
        #: the run this store began (begin_run) and the most records (+ dead letters) it
        #: has seen in it: a Redis that lost the job's state is caught by counts()
        self._run_id: str | None = None
        self._high = 0

    # ---- connection ------------------------------------------------------------------

    def open(self) -> None:
        if self._r is not None:
            return
        opts: dict[str, Any] = {"socket_timeout": 30, "socket_connect_timeout": 5, "decode_responses": True}
        try:
            r: Any = redis.Redis.from_url(self.url, health_check_interval=15, **opts)
            r.ping()
            if str(r.info("cluster").get("cluster_enabled", 0)) == "1":
                # a Cluster node: talk to the cluster (every key of a job is in one slot)
                from redis.cluster import RedisCluster

                r.close()
                r = RedisCluster.from_url(self.url, **opts)
                r.ping()
                self.cluster = True
        except (redis.RedisError, ValueError) as e:
            raise FrontierError(
                f"cannot reach Redis for the frontier at {redact_url(self.url)} ({type(e).__name__}: {e}); "
                "start Redis there, or fix SCALE_FRONTIER_URL"
            ) from None
        self._r = r
        for name, src in (
            ("enqueue", _ENQUEUE),
            ("seed", _SEED),
            ("lease", _LEASE),
            ("renew", _RENEW),
            ("finish", _FINISH),
            ("release", _RELEASE),
            ("dead", _DEAD),
            ("requeue", _REQUEUE),
            ("resolve", _RESOLVE),
            ("status", redis_status.SUMMARY),
            ("heads", redis_status.HEADS),
            ("run", _RUN),
            ("claim", _CLAIM),
            ("counts", _COUNTS),
            ("feed", _FEED),
        ):
            self._scripts[name] = r.register_script(src)

    def close(self) -> None:
        if self._r is not None:
            self._r.close()
            self._r = None

    @property
    def r(self) -> Any:  # redis.Redis with decode_responses=True: str replies
        if self._r is None:
            raise FrontierError("the Redis frontier is not open")
        return self._r

    def _retry(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; on a dropped connection wait (backoff up to 5 s) and retry."""
        delay = 0.1
        start = time.monotonic()
        warned = False
        while True:
            try:
                result = fn()
                if warned:
                    logger.warning("Redis frontier at %s is back", redact_url(self.url))
                return result
            except _RETRYABLE as e:
                if self.retry_for is not None and time.monotonic() - start > self.retry_for:
                    raise FrontierError(f"Redis at {redact_url(self.url)} unreachable: {e}") from None
                if not warned:
                    logger.warning("Redis frontier at %s unreachable (%s); waiting for it", redact_url(self.url), e)
                    warned = True
                self.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _call(self, script: str, *args: Any) -> Any:
        return self._retry(lambda: self._scripts[script](keys=[self.key], args=list(args)))

    def _run_prefix(self) -> str:
        run = self._retry(lambda: self.r.hget(f"{self.key}:run", "id")) or "0"
        return f"{self.key}:{run}"

    def _unlink_run(self, run_id: str) -> None:
        if not run_id:
            return
        pattern = f"{glob_escape(self.key)}:{glob_escape(run_id)}:*"

        def unlink() -> None:
            batch: list[str] = []
            for k in self.r.scan_iter(match=pattern, count=1000):
                batch.append(k)
                if len(batch) >= 500:
                    self.r.unlink(*batch)
                    batch = []
            if batch:
                self.r.unlink(*batch)

        self._retry(unlink)

    # ---- runs ------------------------------------------------------------------------

    def begin_run(self) -> RunInfo:
        kind, rid, started, old = self._call("run", "begin", self.clock())
        if kind == "new":
            self._unlink_run(old)
        self._run_id, self._high = str(rid), 0
        return RunInfo(int(rid), float(started), None, kind == "resumed", {})

    def finish_run(self) -> RunInfo | None:
        res = self._call("run", "finish", self.clock())
        if not res:
            return None
        self._run_id = None  # ended: a later run of the job is no loss of state
        counts = json.loads(res[4]) if len(res) > 4 else self._run_counts(res[1])
        return RunInfo(int(res[1]), float(res[2]), float(res[3]), False, counts)

    def _run_counts(self, rid: str) -> dict[str, int]:
        raw = self._retry(lambda: self.r.hget(f"{self.key}:runs", rid))
        return dict(json.loads(raw).get("counts") or {}) if raw else {}

    def runs(self) -> list[RunInfo]:
        raw = self._retry(lambda: self.r.hvals(f"{self.key}:runs"))
        out = [_run_from_json(x) for x in raw]
        return sorted(out, key=lambda r: r.run_id)

    def reopen_run(self) -> None:
        self._call("run", "reopen", self.clock())

    # ---- workers ---------------------------------------------------------------------

    def claim_worker(self, prefix: str, pid: int, is_alive: Callable[[int], bool]) -> str:
        while True:
            known: dict[str, str] = self._retry(lambda: self.r.hgetall(f"{self.key}:workers"))
            slot = 0
            while True:
                wid = f"{prefix}/{slot}"
                old = known.get(wid)
                if old is None or int(old) == pid or not is_alive(int(old)):
                    break
                slot += 1
            if self._call("claim", wid, old or "", str(pid)):
                return wid

    @property
    def alive_key(self) -> str:
        return f"{self.key}:alive"

    def heartbeat(self, worker: str, until: float) -> None:
        now = self.clock()
        self._retry(lambda: self.r.hset(self.alive_key, worker, f"{now!r} {until!r}"))

    # ---- hot path --------------------------------------------------------------------

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        out: list[EnqueueResult] = []
        for i in range(0, len(requests), 500):
            args: list[Any] = [self.clock()]
            for r in requests[i : i + 500]:
                fc, fr = r.last_failure if r.last_failure else ("", "")
                flag = "u" if r.update else ("r" if r.reopen else "")
                args += [
                    r.fingerprint,
                    r.data,
                    r.domain,
                    str(int(r.priority)),
                    float(r.not_before or 0),
                    int(r.attempts),
                    fc,
                    fr,
                    flag,
                    r.held_by,
                    float(r.held_seconds),
                    r.again if r.reopen else "",
                ]
            out += [EnqueueResult(x) for x in self._call("enqueue", *args)]
        return out

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        added = 0
        for i in range(0, len(requests), SEED_CALL):
            chunk = requests[i : i + SEED_CALL]
            # one script call per priority in the chunk (seeds have one)
            for p in sorted({r.priority for r in chunk}):
                args: list[Any] = [self.clock(), str(int(p))]
                for r in chunk:
                    if r.priority == p:
                        args += (r.fingerprint, r.data, r.domain)
                added += int(self._call("seed", *args))
        return added

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        rows = self._call("lease", self.clock(), worker, int(n), float(seconds))
        out = []
        for fp, d, dom, p, a, enq, el, t, fc, fr, bad in rows:
            if not bad:
                try:
                    out.append(
                        Leased(
                            fp,
                            d,
                            dom,
                            int(p),
                            _field("a", a, int),
                            _field("enq", enq, float),
                            _field("el", el, float),
                            _field("t", t, int),
                            (fc, fr) if fc else None,
                        )
                    )
                    continue
                except ValueError as e:
                    bad = f"unreadable record: {e}"
                    self.dead_letter(fp, bad)
            out.append(Leased(fp, "", dom, 0, 0, 0.0, 0.0, 0, error=bad))
        return out

    def renew(self, worker: str, seconds: float, fingerprints: Sequence[str] | None = None) -> int:
        if fingerprints is not None and not fingerprints:
            return 0
        return int(self._call("renew", worker, self.clock() + seconds, *(fingerprints or ())))

    def ack(self, worker: str, done: Sequence[tuple[str, int]]) -> int:
        if not done:
            return 0
        args: list[Any] = [worker, 3]
        for fp, tok in done:
            args += [fp, str(tok), "", ""]
        return int(self._call("finish", *args))

    def fail(self, worker: str, failed: Sequence[tuple[str, int, str, str]]) -> int:
        if not failed:
            return 0
        args: list[Any] = [worker, 4]
        for fp, tok, cls, reason in failed:
            args += [fp, str(tok), cls, reason]
        return int(self._call("finish", *args))

    def release(self, worker: str, fingerprints: Sequence[str] | None = None) -> int:
        if fingerprints is not None and not fingerprints:
            return 0
        return int(self._call("release", "release", worker, self.clock(), *(fingerprints or ())))

    def reclaim(self, worker: str | None = None) -> int:
        n = int(self._call("release", "reclaim", worker or "", self.clock()))
        back = int(self._call("feed", "recover", self.clock()))
        if back:
            logger.warning("frontier: %d feed message(s) taken by workers no longer alive went back to the feed", back)
        return n

    def dead_letter(self, fingerprint: str, reason: str) -> None:
        self._call("dead", fingerprint, reason, self.clock())

    def dead_letter_count(self) -> int:
        p = self._run_prefix()
        return int(self._retry(lambda: self.r.hlen(f"{p}:dead")))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        p = self._run_prefix()

        def read() -> list[DeadLetter]:
            fps = self.r.zrange(f"{p}:deadz", 0, limit - 1)
            if not fps:
                return []
            out = []
            for fp, raw in zip(fps, self.r.hmget(f"{p}:dead", fps), strict=True):
                if raw:
                    d = json.loads(raw)
                    out.append(DeadLetter(fp, d["reason"], d["data"], float(d["at"])))
            return out

        return self._retry(read)

    # ---- feeders -----------------------------------------------------------------------

    @property
    def feed_key(self) -> str:
        return f"{self.key}:seeds"

    def taken_key(self, worker: str) -> str:
        """The list of feed messages ``worker`` took and has not written yet."""
        return f"{self.feed_key}:taken:{worker}"

    def take_feed(self, worker: str, n: int) -> list[str]:
        return list(self._call("feed", "take", worker, int(n)) or [])

    def feed_done(self, worker: str) -> None:
        self._call("feed", "done", worker)

    # ---- observation -------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        run, *vals = self._call("counts")  # [''] when the job has no run at all
        vals = vals or ["0"] * (len(COUNT_KEYS) + 1)
        counts = {k: int(v) for k, v in zip(COUNT_KEYS, vals, strict=False)}
        if self._run_id is not None:
            self._check_intact(run, sum(counts.values()) + int(vals[-1]))
        return counts

    def _check_intact(self, run: str, total: int) -> None:
        """Within a run, records are only added (a dead letter moves one): a run marker that
        vanished or changed, or fewer records than seen before, means the state is gone."""
        where = f"Redis at {redact_url(self.url)}"
        if run != self._run_id:
            now = f"run {run} is current" if run else f"the run marker {self.key}:run is gone"
            raise FrontierFatal(
                f"{where} no longer has job {self.job!r}'s run {self._run_id} ({now}): the server lost "
                "the job's state (restarted without persistence, flushed, or failed over to a replica "
                "that had not caught up), or the job was reset or finished and started again meanwhile. Requests that were only in "
                "Redis are lost, so this worker stops instead of declaring the run finished. Run Redis "
                "with `appendonly yes`, then start the job again"
            )
        if total < self._high:
            raise FrontierFatal(
                f"{where}: job {self.job!r} run {run} has {total} records (with dead letters), fewer than the "
                f"{self._high} seen before: the server lost writes (restarted from an older snapshot, or "
                "failed over to a replica that had not caught up). Requests that were only in Redis are "
                "lost, so this worker stops instead of declaring the run finished. Run Redis with "
                "`appendonly yes`, then start the job again"
            )
        self._high = total

    def durability_warning(self) -> str | None:
        """Neither AOF nor RDB snapshots (CONFIG GET, where the server allows it)."""
        try:
            cfg: dict[str, str] = {}
            for name in ("appendonly", "save"):
                cfg.update(self.r.config_get(name))
        except redis.RedisError as e:  # CONFIG disabled or renamed (managed Redis): cannot tell
            logger.debug("Redis persistence unknown (CONFIG GET refused: %s)", e)
            return None
        if cfg.get("appendonly") == "no" and not (cfg.get("save") or "").strip():
            return (
                f"Redis at {redact_url(self.url)} has no persistence (appendonly no, no RDB snapshots): "
                "a restart of it loses the job's frontier. Run it with `appendonly yes` for a crawl "
                "that survives a Redis restart"
            )
        return None

    def next_eligible_at(self) -> float | None:
        p = self._run_prefix()
        got = self._retry(lambda: self.r.zrange(f"{p}:delayed", 0, 0, withscores=True))
        return float(got[0][1]) if got else None

    def status(self) -> Status:
        return redis_status.read_status(self)

    def _current_run(self) -> RunInfo | None:
        rid = self._retry(lambda: self.r.hget(f"{self.key}:run", "id"))
        if not rid:
            return None
        raw = self._retry(lambda: self.r.hget(f"{self.key}:runs", rid))
        return _run_from_json(raw) if raw else None

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        p = self._run_prefix()
        h = self._retry(lambda: self.r.hgetall(f"{p}:r:{fingerprint}"))
        if not h:
            return None
        st = int(h["st"])
        return {
            "fingerprint": fingerprint,
            "state": (State.PENDING, State.PENDING, State.LEASED, State.DONE, State.FAILED)[st],
            "data": h.get("d", ""),
            "domain": h["dom"],
            "priority": int(h["p"]),
            "attempts": int(h["a"]),
            "eligible_at": float(h["el"]),
            "enqueued_at": float(h["enq"]),
            "last_failure": (h["fc"], h.get("fr", "")) if h.get("fc") else None,
            "owner": h.get("o"),
            "lease_expires": float(h["le"]) if h.get("le") else None,
            "token": int(h["t"]),
        }

    # ---- commands ----------------------------------------------------------------------

    def reset(self) -> None:
        self._run_id = None
        old = self._call("run", "reset", self.clock())
        self._unlink_run(str(old))

    def resolve(self, fingerprints: Sequence[str]) -> int:
        if not fingerprints:
            return 0
        return int(self._call("resolve", *fingerprints))

    def requeue(self, cls: str | None = None) -> int:
        n = int(self._call("requeue", self.clock(), cls or ""))
        if n:
            self.reopen_run()
        return n


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern (``*?[]\\`` escaped): a job named
    ``books[1]`` must never match the keys of ``books1``."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _field(name: str, value: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"field {name}={value[:50]!r} is not a number") from None


def _run_from_json(raw: str) -> RunInfo:
    d = json.loads(raw)
    counts = d.get("counts") or {}
    return RunInfo(
        int(d["run_id"]),
        float(d["started_at"]),
        None if d.get("ended_at") in (False, None) else float(d["ended_at"]),
        False,
        dict(counts) if isinstance(counts, dict) else {},
    )
