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
    scale:{J}:R:r:FP         HASH  one record not done: st d dom p a el enq fc fr o le t (el only
                                   when it differs from enq; d: the request, codec.encode)
    scale:{J}:R:d:PREFIX     HASH  done fingerprints: member = the fingerprint after PREFIX (its
                                   first 3 to 7 characters, more as the run grows), hex packed
                                   to bytes; small enough to stay listpacks (lua/prelude.lua)
    scale:{J}:R:prios        ZSET  priorities with ready work
    scale:{J}:R:dq:P         ZSET  domains with ready work at priority P, by last service
    scale:{J}:R:q:P:DOMAIN   LIST  ready fingerprints, popped from the head: a crawl's request is
                                   pushed at the head (LIFO), a seed, start request or FIFO one at
                                   the tail, a due retry or released lease at the head (stale
                                   entries skipped at lease)
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

import logging
from collections.abc import Sequence
from typing import Any

import redis

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.redis import status as redis_status
from scrapy_scale.frontier.backends.redis.base import SEED_CALL, RedisBase, field_of, glob_escape
from scrapy_scale.frontier.store import (
    COUNT_KEYS,
    DeadLetter,
    EnqueueResult,
    FrontierFatal,
    Leased,
    NewRequest,
    RunInfo,
    State,
    Status,
)
from scrapy_scale.redact import redact_url
from scrapy_scale.shared_values import Refused, finite, loads, text

__all__ = ["RedisStore", "glob_escape"]

logger = logging.getLogger(__name__)


class RedisStore(RedisBase):
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
                    "1" if r.tail else "",
                    str(r.token) if r.update and r.token is not None else "",
                ]
            out += [EnqueueResult(x) for x in self.call_script("enqueue", *args)]
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
                added += int(self.call_script("seed", *args))
        return added

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        rows = self.call_script("lease", self.clock(), worker, int(n), float(seconds))
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
                            field_of("a", a, int),
                            field_of("enq", enq, float),
                            field_of("el", el, float),
                            field_of("t", t, int),
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
        return int(self.call_script("renew", worker, self.clock() + seconds, *(fingerprints or ())))

    def ack(self, worker: str, done: Sequence[tuple[str, int]]) -> int:
        if not done:
            return 0
        args: list[Any] = [worker, 3]
        for fp, tok in done:
            args += [fp, str(tok), "", ""]
        return int(self.call_script("finish", *args))

    def fail(self, worker: str, failed: Sequence[tuple[str, int, str, str]]) -> int:
        if not failed:
            return 0
        args: list[Any] = [worker, 4]
        for fp, tok, cls, reason in failed:
            args += [fp, str(tok), cls, reason]
        return int(self.call_script("finish", *args))

    def release(self, worker: str, fingerprints: Sequence[str] | None = None) -> int:
        if fingerprints is not None and not fingerprints:
            return 0
        return int(self.call_script("release", "release", worker, self.clock(), *(fingerprints or ())))

    def reclaim(self, worker: str | None = None) -> int:
        n = int(self.call_script("release", "reclaim", worker or "", self.clock()))
        back = int(self.call_script("feed", "recover", self.clock()))
        if back:
            logger.warning("frontier: %d feed message(s) taken by workers no longer alive went back to the feed", back)
        return n

    def dead_letter(self, fingerprint: str, reason: str) -> None:
        self.call_script("dead", fingerprint, reason, self.clock())

    def dead_letter_count(self) -> int:
        p = self.run_prefix()
        return int(self.retrying(lambda: self.r.hlen(f"{p}:dead")))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        p = self.run_prefix()

        def read() -> list[DeadLetter]:
            fps = self.r.zrange(f"{p}:deadz", 0, limit - 1)
            if not fps:
                return []
            out = []
            for fp, raw in zip(fps, self.r.hmget(f"{p}:dead", fps), strict=True):
                try:
                    d = loads(raw) if raw else None
                except Refused:
                    d = None
                at = finite(d.get("at"), 0.0) if isinstance(d, dict) else None
                if isinstance(d, dict) and at is not None:
                    out.append(DeadLetter(fp, str(d.get("reason", "")), str(d.get("data", "")), at))
                elif raw:
                    read_back.warnings.warn(self.job, "dead", "frontier: skipping unreadable dead letter %r", fp)
            return out

        return self.retrying(read)

    # ---- feeders -----------------------------------------------------------------------

    @property
    def feed_key(self) -> str:
        return f"{self.key}:seeds"

    def taken_key(self, worker: str) -> str:
        """The list of feed messages ``worker`` took and has not written yet."""
        return f"{self.feed_key}:taken:{worker}"

    def take_feed(self, worker: str, n: int) -> list[str]:
        """Up to ``n`` feed messages, taken. Read as bytes: a message that is not UTF-8 must
        not fail the read (UnicodeDecodeError failed every sync, the message staying taken);
        it is passed on as bytes, and the codec refuses it with its warning."""
        script = self._scripts["feed"]

        def take() -> Any:
            args = ("EVALSHA", script.sha, 1, self.key, "take", worker, int(n))
            try:
                return self.r.execute_command(*args, NEVER_DECODE=True)
            except redis.exceptions.NoScriptError:
                self.r.script_load(script.script)
                return self.r.execute_command(*args, NEVER_DECODE=True)

        out: list[Any] = []
        for m in self.retrying(take) or []:
            try:
                out.append(text(m))
            except Refused:
                out.append(m)
        return out

    def feed_done(self, worker: str) -> None:
        self.call_script("feed", "done", worker)

    # ---- observation -------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        # read as bytes, checked: a count another program wrote ("lots", not UTF-8) is 0
        # with one warning, not a worker's crash (read_back)
        run, *vals = self.call_script_bytes("counts")  # [''] when the job has no run at all
        vals = vals or [b"0"] * (len(COUNT_KEYS) + 2)
        names = (*COUNT_KEYS, "dead", "bad_done")
        got = read_back.counts(self.job, dict(zip(names, vals, strict=False)))
        counts = {k: int(got.get(k, 0)) for k in COUNT_KEYS}
        if self._run_id is not None:
            self._check_intact(bytes(run).decode("utf-8", "replace"), sum(counts.values()) + int(got.get("dead", 0)))
        self._warn_bad_done([str(int(got.get("bad_done", 0)))])
        return counts

    def _warn_bad_done(self, got: list[str]) -> None:
        """One warning when the done set had a key of another type (written by someone else)."""
        try:
            bad = int(got[0]) if got else 0
        except ValueError:
            bad = 1
        if bad and not self._warned_bad_done:
            self._warned_bad_done = True
            logger.warning(
                "frontier: %d key(s) of job %r's done set held something else (written by another program?) "
                "and were replaced; the URLs they held may be fetched again",
                bad,
                self.job,
            )

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
        p = self.run_prefix()
        got = self.retrying(lambda: self.r.zrange(f"{p}:delayed", 0, 0, withscores=True))
        return read_back.eligible_time(self.job, got[0][1], self.clock()) if got else None

    def status(self) -> Status:
        return redis_status.read_status(self)

    def current_run(self) -> RunInfo | None:
        raw = self.hget_bytes(f"{self.key}:run", "id")  # read back: bytes (see run_prefix)
        return self.run_info(bytes(raw).decode("utf-8", "replace")) if raw else None

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        p = self.run_prefix()
        try:
            h = self.retrying(lambda: self.r.hgetall(f"{p}:r:{fingerprint}"))
        except UnicodeDecodeError:  # a field another program wrote that is not UTF-8
            read_back.unreadable_record(self.job, fingerprint, "a field is not UTF-8")
            return None
        if not h:
            if not int(self.call_script("isdone", fingerprint)):
                return None
            # done: only its fingerprint is kept (in the done set)
            return {
                "fingerprint": fingerprint,
                "state": State.DONE,
                "data": "",
                "domain": "",
                "priority": 0,
                "attempts": 0,
                "eligible_at": 0.0,
                "enqueued_at": 0.0,
                "last_failure": None,
                "owner": None,
                "lease_expires": None,
                "token": 0,
            }
        return read_back.redis_record(self.job, fingerprint, h)

    def give_up_after(self, seconds: float) -> None:
        self.retry_for = seconds

    def known_jobs(self) -> list[str]:
        names = set()
        for key in self.r.scan_iter(match="scale:{*}:runs", count=1000):
            names.add(key[len("scale:{") : -len("}:runs")])
        return sorted(names)

    # ---- commands ----------------------------------------------------------------------

    def reset(self) -> None:
        self._run_id = None
        old = self.call_script("run", "reset", self.clock())
        self._unlink_run(str(old))

    def resolve(self, fingerprints: Sequence[str]) -> int:
        if not fingerprints:
            return 0
        return int(self.call_script("resolve", *fingerprints))

    def requeue(self, cls: str | None = None) -> int:
        n = int(self.call_script("requeue", self.clock(), cls or ""))
        if n:
            self.reopen_run()
        return n
