"""The Redis frontier's connection, runs and workers (:class:`RedisBase`); the records
themselves are :class:`.store.RedisStore` (its key layout is described there), split into
partitions by site (:mod:`.partitions`): the run-level keys live in partition 0, every
partition keeps a copy of the run id so that its scripts find the run's keys in their own slot.

Connection drops (a Redis restart) are retried with backoff for as long as
``retry_for`` allows (forever by default: the worker waits).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.redis import lua
from scrapy_scale.frontier.backends.redis import partitions as parts_mod
from scrapy_scale.frontier.backends.workers_read import pid_of
from scrapy_scale.frontier.store import FrontierError, FrontierFatal, FrontierStore, RunInfo
from scrapy_scale.redact import redact_url
from scrapy_scale.redis_open import RedisOpenError, is_cluster, open_redis
from scrapy_scale.shared_values import decode_hash

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: seeds per call of the seed script (a call keeps Redis busy for about 2 ms)
SEED_CALL = 1000

RETRYABLE: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)
try:  # a Cluster that is failing over or resharding
    from redis.exceptions import ClusterDownError, TryAgainError

    RETRYABLE += (ClusterDownError, TryAgainError)
except ImportError:  # pragma: no cover
    pass
#: RETRYABLE, and the error of a script refused while its slot moves (see slot_moving)
WAITABLE: tuple[type[Exception], ...] = (*RETRYABLE, redis.ResponseError)


class RedisBase(FrontierStore):
    """The connection, runs and workers of one job."""

    schemes = ("redis", "rediss")

    #: seconds to keep retrying when Redis is unreachable after open(); None = forever
    retry_for: float | None = None

    def __init__(
        self, url: str, job: str, clock: clock_mod.Clock = clock_mod.wall, partitions: int | None = None
    ) -> None:
        super().__init__(job, clock)
        self.url = url
        self.key = parts_mod.key_of(job, 0, 1)
        #: the partition count asked for (SCALE_FRONTIER_PARTITIONS; None: the job's stored
        #: one, else the default), and the one in use once open, with its naming
        self.want_parts = partitions
        self.parts = 1
        self.layout = parts_mod.Layout(1)
        #: the key prefix of each partition (partition 0 first)
        self.keys = [self.key]
        self.lease_plan = parts_mod.LeasePlan(1)
        #: partition of each record this worker holds (leased, or held in its memory)
        self._held: dict[str, int] = {}
        self._r: Any = None
        self._scripts: dict[str, Any] = {}
        self.sleep: Callable[[float], None] = time.sleep
        #: True when the URL points at a Redis Cluster node
        self.cluster = False
        #: the run this store began (begin_run) and the most records (+ dead letters) it
        #: has seen in it, per partition: a Redis that lost the job's state is caught by counts()
        self._run_id: str | None = None
        self._highs: dict[int, int] = {}
        #: the one warning about done-set keys of another type was given
        self._warned_bad_done = False

    # ---- connection ------------------------------------------------------------------

    def open(self) -> None:
        if self._r is not None:
            return
        try:
            r = open_redis(
                self.url, socket_timeout=30, socket_connect_timeout=5, decode_responses=True, health_check_interval=15
            )
        except RedisOpenError as e:
            raise FrontierError(
                f"cannot reach Redis for the frontier at {redact_url(self.url)} ({e.reason}); "
                "start Redis there, or fix SCALE_FRONTIER_URL"
            ) from None
        self.cluster = is_cluster(r)
        self._r = r
        for name in lua.SCRIPTS:
            self._scripts[name] = r.register_script(lua.script(name))
        try:
            self.use_layout(self._choose_layout())
        except FrontierError:
            self.close()
            raise

    def use_layout(self, layout: parts_mod.Layout) -> None:
        self.layout, self.parts = layout, layout.parts
        self.keys = layout.keys(self.job)
        self.lease_plan = parts_mod.LeasePlan(layout.parts)

    def _choose_layout(self) -> parts_mod.Layout:
        """The job's stored partitions (checked: a bad value is refused; a job of the first
        naming keeps it), else the count asked for, else the default (1 on a single node, 4
        per primary on a Cluster), named by slot. A worker that asks for another count than
        the stored one is refused."""
        got = self.retrying(
            lambda: self.r.execute_command("HMGET", f"{self.key}:run", "id", parts_mod.FIELD, NEVER_DECODE=True)
        )
        rid, raw = (list(got) + [None, None])[:2]
        stored: parts_mod.Layout | None = None
        if raw == b"":
            pass  # reset: the next start chooses
        elif raw is not None:
            try:
                stored = parts_mod.stored_layout(raw)
            except ValueError as e:
                raise FrontierError(
                    f"job {self.job!r}'s partition count ({self.key}:run field {parts_mod.FIELD}) is unusable: {e} "
                    "(written by another program, or a later version?); set it back to what its workers stored "
                    "(S/slot, or S alone for a job of the first naming), or `scrapy scale reset` the job after "
                    "deleting that field"
                ) from None
        elif rid is not None:
            stored = parts_mod.Layout(1)  # started before a job had partitions: one
        if stored is not None and self.want_parts is not None and stored.parts != self.want_parts:
            n = stored.parts
            raise FrontierError(
                f"job {self.job!r} was started with SCALE_FRONTIER_PARTITIONS = {n} and this worker has "
                f"{self.want_parts}: the partitions are fixed for a job's life; start it with {n} "
                "(or leave the setting out), or `scrapy scale reset` the job first"
            )
        if stored is not None:
            return stored
        if self.want_parts is not None:
            return parts_mod.Layout(self.want_parts)
        primaries = len(self.r.get_primaries()) if self.cluster else None
        return parts_mod.Layout(parts_mod.default_parts(primaries))

    def close(self) -> None:
        if self._r is not None:
            self._r.close()
            self._r = None

    @property
    def r(self) -> Any:  # redis.Redis with decode_responses=True: str replies
        if self._r is None:
            raise FrontierError("the Redis frontier is not open")
        return self._r

    def retrying(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; on a dropped connection wait (backoff up to 5 s) and retry; a script
        refused while its Cluster slot moves (a reshard) is retried the same way (up to 0.5 s
        apart: a slot moves in well under a second)."""
        delay = 0.1
        start = time.monotonic()
        warned = False
        while True:
            try:
                result = fn()
                if warned:
                    logger.warning("Redis frontier at %s is back", redact_url(self.url))
                return result
            except WAITABLE as e:
                moving = not isinstance(e, RETRYABLE)
                if moving and not slot_moving(e):
                    raise
                if self.retry_for is not None and time.monotonic() - start > self.retry_for:
                    raise FrontierError(f"Redis at {redact_url(self.url)} unreachable: {e}") from None
                if not warned:
                    if moving:
                        logger.warning(
                            "Redis frontier at %s: a slot of job %r is moving to another Cluster node; "
                            "waiting for the move to end",
                            redact_url(self.url),
                            self.job,
                        )
                    else:
                        logger.warning("Redis frontier at %s unreachable (%s); waiting for it", redact_url(self.url), e)
                    warned = True
                self.sleep(delay)
                delay = min(delay * 2, 0.5 if moving else 5.0)

    def call_script(self, script: str, *args: Any) -> Any:
        """Run ``script`` on partition 0 (the run-level keys)."""
        return self.call_at(0, script, *args)

    def call_at(self, part: int, script: str, *args: Any) -> Any:
        """Run ``script`` on partition ``part``: every key it touches has that partition's
        hash tag (one slot)."""
        key = self.keys[part]
        return self.retrying(lambda: self._scripts[script](keys=[key], args=list(args)))

    def call_script_bytes(self, script: str, *args: Any) -> Any:
        """:meth:`call_script` with the reply left as bytes: a reply that carries what
        another program wrote (a field name that is not UTF-8) must not fail the read."""
        return self.call_at_bytes(0, script, *args)

    def call_at_bytes(self, part: int, script: str, *args: Any) -> Any:
        """:meth:`call_at` with the reply left as bytes (see :meth:`call_script_bytes`)."""
        s = self._scripts[script]
        key = self.keys[part]

        def call() -> Any:
            argv = ("EVALSHA", s.sha, 1, key, *args)
            try:
                return self.r.execute_command(*argv, NEVER_DECODE=True)
            except redis.exceptions.NoScriptError:
                self.r.script_load(s.script)
                return self.r.execute_command(*argv, NEVER_DECODE=True)

        return self.retrying(call)

    def hget_bytes(self, key: str, field: str) -> bytes | None:
        """One field of a hash as bytes (see :meth:`call_script_bytes`)."""
        return self.retrying(lambda: self.r.execute_command("HGET", key, field, NEVER_DECODE=True))

    def run_prefix(self, part: int = 0) -> str:
        # read back as bytes: an id another program made no UTF-8 names keys no run wrote (a
        # worker stops at begin_run on it; `status` shows no counts), never a traceback
        key = self.keys[part]
        raw = self.hget_bytes(f"{key}:run", "id")
        run = "0" if not raw else bytes(raw).decode("utf-8", "replace")
        return f"{key}:{run}"

    def _bad_marker(self, rid: Any) -> FrontierFatal:
        return FrontierFatal(
            f"job {self.job!r}'s run marker {self.key}:run names run {str(rid)[:30]!r}, which is no run "
            "number a worker writes (another program wrote it): no run can be joined. Reset the job "
            "(`scrapy scale reset`) to start it over"
        )

    def _unlink_run(self, run_id: str, part: int | None = None) -> None:
        if not run_id:
            return
        for i in range(self.parts) if part is None else (part,):
            self._unlink_keys(f"{glob_escape(self.keys[i])}:{glob_escape(run_id)}:*")

    def _unlink_keys(self, pattern: str) -> None:

        def unlink() -> None:
            batch: list[str] = []
            for k in self.r.scan_iter(match=pattern, count=1000):
                batch.append(k)
                if len(batch) >= 500:
                    self.r.unlink(*batch)
                    batch = []
            if batch:
                self.r.unlink(*batch)

        self.retrying(unlink)

    # ---- runs ------------------------------------------------------------------------

    def begin_run(self) -> RunInfo:
        # as bytes: the marker's id is read back, and another program may have made it no text
        reply = self.call_script_bytes("run", "begin", self.clock(), self.layout.stored())
        kind, rid, started, old = (bytes(x).decode("utf-8", "replace") for x in reply[:4])
        info = read_back.run_kept(self.job, rid, started, None, self.clock())
        if info is None:
            raise self._bad_marker(rid)
        if len(reply) > 4 and reply[4]:
            read_back.warnings.warn(
                self.job,
                "runseq",
                "frontier: job %r's run sequence %s:meta runseq was no whole number (another program "
                "wrote it); run %s follows the highest run recorded",
                self.job,
                self.key,
                rid,
            )
        stored = bytes(reply[5]).decode("utf-8", "replace") if len(reply) > 5 else ""
        if stored != self.layout.stored():  # another worker stored other partitions meanwhile
            raise FrontierError(
                f"job {self.job!r} was started with partitions {stored[:20]!r} (run field {parts_mod.FIELD}) and "
                f"this worker has {self.layout.stored()!r}: the partitions are fixed for a job's life"
            )
        for i in range(1, self.parts):  # every partition's scripts find the run in their own slot
            before = str(self.call_at(i, "run", "follow", self.clock(), rid))
            if before and before not in (str(rid), str(old)):
                self._unlink_run(before, i)  # a start that stopped half way
        if kind == "new":
            self._unlink_run(old)
        self._run_id, self._highs = str(rid), {}
        return RunInfo(info.run_id, info.started_at, None, kind == "resumed", {})

    def open_counts(self, part: int) -> dict[str, int] | None:
        """The counts of one partition (None: it has no run)."""
        run, *vals = self.call_at_bytes(part, "counts")
        if not run:
            return None
        names = ("pending", "delayed", "leased", "done", "failed")
        got = read_back.counts(self.job, dict(zip(names, vals, strict=False)))  # checked: a bad count is 0
        return {k: int(got.get(k, 0)) for k in names}

    def _others_open(self) -> dict[str, int] | None:
        """The summed counts of partitions 1..S-1, or None when one has work left."""
        total = {"pending": 0, "delayed": 0, "leased": 0, "done": 0, "failed": 0}
        for i in range(1, self.parts):
            c = self.open_counts(i) or {}
            if c.get("pending") or c.get("delayed") or c.get("leased"):
                return None
            for k in total:
                total[k] += c.get(k, 0)
        return total

    def finish_run(self) -> RunInfo | None:
        others = self._others_open()
        if others is None:
            return None
        res = self.call_script("run", "finish", self.clock(), json.dumps(others) if self.parts > 1 else "")
        if not res:
            return None
        if self.parts > 1 and len(res) > 4 and self._others_open() is None:
            # a request written to another partition while partition 0 was finishing (its
            # parent acked there after): the run goes on
            self.reopen_run()
            return None
        self._run_id = None  # ended: a later run of the job is no loss of state
        info = read_back.run_kept(self.job, res[1], res[2], res[3], self.clock())
        if info is None:  # no run number: nothing this worker can have finished
            return None
        if len(res) > 4:  # the counts this call wrote (the script's own JSON)
            counts = read_back.counts(self.job, read_back.run_counts(self.job, res[4], res[1]) or {})
            return RunInfo(info.run_id, info.started_at, info.ended_at, False, {k: int(v) for k, v in counts.items()})
        return self.run_info(str(res[1])) or info

    def run_info(self, rid: str) -> RunInfo | None:
        """Run ``rid``'s document read back, checked (None: none, or unreadable)."""
        raw = self.hget_bytes(f"{self.key}:runs", rid)
        return None if raw is None else read_back.run_doc(self.job, raw, self.clock())

    def runs(self) -> list[RunInfo]:
        raw = self.retrying(lambda: self.r.execute_command("HVALS", f"{self.key}:runs", NEVER_DECODE=True))
        out = [x for x in (read_back.run_doc(self.job, doc, self.clock()) for doc in raw or []) if x is not None]
        return sorted(out, key=lambda r: r.run_id)

    def reopen_run(self) -> None:
        rid = self.call_script("run", "reopen", self.clock(), self.layout.stored())
        for i in range(1, self.parts):  # a seed before any start: the partitions take the run
            self.call_at(i, "run", "follow", self.clock(), rid)

    # ---- workers ---------------------------------------------------------------------

    def claim_worker(self, prefix: str, pid: int, is_alive: Callable[[int], bool]) -> str:
        key = f"{self.key}:workers"
        while True:
            # read as bytes: a field or pid that is not UTF-8 must not fail the read, and the
            # claim compares the stored value byte for byte (workers_read: checked pids)
            known: dict[bytes, bytes] = self.retrying(lambda: self.r.execute_command("HGETALL", key, NEVER_DECODE=True))
            slot = 0
            while True:
                wid = f"{prefix}/{slot}"
                old = known.get(wid.encode())
                if old is None:
                    break
                old_pid = pid_of(wid, old)
                if old_pid is None or old_pid == pid or not is_alive(old_pid):
                    break
                slot += 1
            if self.call_script("claim", wid, old or b"", str(pid)):
                return wid

    @property
    def alive_key(self) -> str:
        return f"{self.key}:alive"

    def heartbeat(self, worker: str, until: float) -> None:
        now = self.clock()
        self.retrying(lambda: self.r.hset(self.alive_key, worker, f"{now!r} {until!r}"))

    def beats(self) -> dict[str, tuple[Any, Any]]:
        # read as bytes: a field or value that is not UTF-8 (another program wrote it while
        # the run goes on) is skipped with one warning, not a UnicodeDecodeError at every sync
        raw = self.retrying(lambda: self.r.execute_command("HGETALL", self.alive_key, NEVER_DECODE=True))
        good, bad = decode_hash(raw or {}, as_json=False)
        read_back.warnings.refused(self.alive_key, bad, "frontier: heartbeats")
        out: dict[str, tuple[Any, Any]] = {}
        for worker, value in good.items():
            parts = value.split()
            out[worker] = (parts[0], parts[1]) if len(parts) == 2 else (value, None)
        return out


def slot_moving(error: Exception) -> bool:
    """A script refused by its slot guard (lua/guard.lua) because its slot is moving to
    another Cluster node: nothing was written, and it runs once the move is done."""
    return isinstance(error, redis.ResponseError) and "attempted to access a non local key" in str(error)


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern (``*?[]\\`` escaped): a job named
    ``books[1]`` must never match the keys of ``books1``."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def field_of(name: str, value: str, kind: Callable[[str], T]) -> T:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"field {name}={value[:50]!r} is not a number") from None
