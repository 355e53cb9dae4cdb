"""The Redis frontier's connection (:class:`RedisConnection`): the client, the Lua
scripts, retries, and the job's partitions by site (:mod:`.partitions`) with the partition
of each record this worker holds; owned by the store, shared by its units. The key layout
is described in :mod:`.store`.

Connection drops (a Redis restart) are retried with backoff for as long as
``retry_for`` allows (forever by default: the worker waits).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from scrapy_scale import clock as clock_mod
from scrapy_scale.frontier.backends.redis import lua
from scrapy_scale.frontier.backends.redis import partitions as parts_mod
from scrapy_scale.frontier.store import FrontierError, NewRequest, StoreWaiting
from scrapy_scale.redact import redact_url
from scrapy_scale.redis_open import RedisOpenError, is_cluster, open_redis

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


class RedisConnection:
    """The connection of one job's Redis frontier, and its partitions."""

    #: seconds to keep retrying when Redis is unreachable after open(); None = forever
    retry_for: float | None = None

    def __init__(
        self, url: str, job: str, clock: clock_mod.Clock = clock_mod.wall, partitions: int | None = None
    ) -> None:
        self.job = job
        self.clock = clock
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
        self.held: dict[str, int] = {}
        self._r: Any = None
        self._scripts: dict[str, Any] = {}
        self.sleep: Callable[[float], None] = time.sleep
        #: per thread: is a wait cut short (:meth:`impatient`)?
        self._local = threading.local()
        #: True when the URL points at a Redis Cluster node
        self.cluster = False

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

    @contextmanager
    def impatient(self) -> Iterator[None]:
        """Within: a call of this thread that would wait (below) raises StoreWaiting."""
        self._local.impatient = True
        try:
            yield
        finally:
            self._local.impatient = False

    def retrying(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; on a dropped connection wait (backoff up to 5 s) and retry; a script
        refused while its Cluster slot moves (a reshard) is retried the same way (up to 0.5 s
        apart: a slot moves in well under a second). Within :meth:`impatient`, raise
        StoreWaiting instead of the first wait."""
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
                if getattr(self._local, "impatient", False):
                    raise StoreWaiting(f"Redis at {redact_url(self.url)}: {e}") from None
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

    def call_many(
        self,
        calls: Sequence[tuple[int, str, Sequence[Any]]],
        raw: bool = False,
        answered: dict[int, Any] | None = None,
    ) -> list[Any]:
        """Run script calls ``(partition, script, args)``, each as :meth:`call_at` (or
        :meth:`call_at_bytes` when ``raw``) would, their replies in order. Calls of several
        partitions go in one pipeline: one round trip to each Redis node that holds some (a
        Cluster pipeline writes to every node before it reads any), not one per partition.
        A call the pipeline could not run (a dropped connection, a slot moving, a script
        the node does not know yet) is run again alone, with :meth:`retrying`'s waits: the
        scripts are idempotent under a retry (see :mod:`.store`); another error is raised
        as :meth:`call_at` raises it. The calls that did run have changed the store even
        then: ``answered`` (when given) gets each one's reply by its index in ``calls``,
        before the error is raised, so the caller can tell what they did."""
        one = self.call_at_bytes if raw else self.call_at
        if len(calls) <= 1 or len({part for part, _, _ in calls}) <= 1:
            out: list[Any] = []
            for part, script, args in calls:  # in order: a failed call stops the rest
                out.append(one(part, script, *args))
                if answered is not None:
                    answered[len(out) - 1] = out[-1]
            return out

        def send() -> list[Any]:
            pipe = self.r.pipeline(transaction=False)
            options = {"NEVER_DECODE": True} if raw else {}
            for part, script, args in calls:
                pipe.execute_command("EVALSHA", self._scripts[script].sha, 1, self.keys[part], *args, **options)
            return list(pipe.execute(raise_on_error=False))

        try:
            got = send()
        except RETRYABLE:
            got = [None] * len(calls)  # each call again alone, with the waits
            failed = True
        else:
            failed = False
        if answered is not None and not failed:
            answered.update((i, x) for i, x in enumerate(got) if not isinstance(x, Exception))
        out = []
        for i, ((part, script, args), reply) in enumerate(zip(calls, got, strict=True)):
            if failed or isinstance(reply, Exception):
                if not (failed or _again_alone(reply)):
                    raise reply
                reply = one(part, script, *args)
                if answered is not None:
                    answered[i] = reply
            out.append(reply)
        return out

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

    def unlink_run(self, run_id: str, part: int | None = None) -> None:
        if not run_id:
            return
        for i in range(self.parts) if part is None else (part,):
            self.unlink_keys(f"{glob_escape(self.keys[i])}:{glob_escape(run_id)}:*")

    def unlink_keys(self, pattern: str) -> None:

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

    # ---- partitions ----------------------------------------------------------------

    def by_part(self, fingerprints: Sequence[str]) -> dict[int, list[str]]:
        """Fingerprints by the partition this worker leased them from; one it does not know
        (leased by an earlier process) is asked of every partition (the scripts check the
        owner or token, so only its own partition acts)."""
        if self.parts == 1:
            return {0: list(fingerprints)}
        out: dict[int, list[str]] = {}
        for f in fingerprints:
            known = self.held.get(f)
            for part in range(self.parts) if known is None or known >= self.parts else (known,):
                out.setdefault(part, []).append(f)
        return out

    def part_of(self, r: NewRequest) -> int:
        """A request's partition: where its record already is when this worker holds it
        (an update may name another domain, a redirect's), else its site's."""
        known = self.held.get(r.fingerprint)
        if known is not None and known < self.parts:
            return known
        return parts_mod.partition_of(r.domain, self.parts)

    def forget(self, fingerprints: Sequence[str] | None) -> None:
        """This worker no longer holds these records (None: any)."""
        if fingerprints is None:
            self.held.clear()
        else:
            for f in fingerprints:
                self.held.pop(f, None)


def _again_alone(error: Exception) -> bool:
    """May a call that failed in a pipeline with ``error`` run again alone? A dropped
    connection, a slot moving, or a script the node has not loaded (a new primary)."""
    return isinstance(error, (*RETRYABLE, redis.exceptions.NoScriptError)) or slot_moving(error)


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
