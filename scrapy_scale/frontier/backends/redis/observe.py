"""What the Redis frontier store reads back (:class:`RedisObserve`): counts with the
lost-data check, status, dead letters, one record, the jobs known; each summed or merged
over the job's partitions (:mod:`.partitions`), and the partition of a fingerprint this
worker holds."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

import redis

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.redis import status as redis_status
from scrapy_scale.frontier.backends.redis.base import RedisBase
from scrapy_scale.frontier.store import COUNT_KEYS, DeadLetter, FrontierFatal, RunInfo, State, Status
from scrapy_scale.redact import redact_url
from scrapy_scale.shared_values import Refused, finite, loads

logger = logging.getLogger(__name__)


class RedisObserve(RedisBase):
    def by_part(self, fingerprints: Sequence[str]) -> dict[int, list[str]]:
        """Fingerprints by the partition this worker leased them from; one it does not know
        (leased by an earlier process) is asked of every partition (the scripts check the
        owner or token, so only its own partition acts)."""
        if self.parts == 1:
            return {0: list(fingerprints)}
        out: dict[int, list[str]] = {}
        for f in fingerprints:
            known = self._held.get(f)
            for part in range(self.parts) if known is None or known >= self.parts else (known,):
                out.setdefault(part, []).append(f)
        return out

    def dead_letter_count(self) -> int:
        def count(part: int) -> int:
            p = self.run_prefix(part)
            return int(self.retrying(lambda: self.r.hlen(f"{p}:dead")))

        return sum(count(i) for i in range(self.parts))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        out: list[DeadLetter] = []
        for part in range(self.parts):
            p = self.run_prefix(part)

            def read(p: str = p) -> list[DeadLetter]:
                fps = self.r.zrange(f"{p}:deadz", 0, limit - 1)
                if not fps:
                    return []
                got = []
                for fp, raw in zip(fps, self.r.hmget(f"{p}:dead", fps), strict=True):
                    try:
                        d = loads(raw) if raw else None
                    except Refused:
                        d = None
                    at = finite(d.get("at"), 0.0) if isinstance(d, dict) else None
                    if isinstance(d, dict) and at is not None:
                        got.append(DeadLetter(fp, str(d.get("reason", "")), str(d.get("data", "")), at))
                    elif raw:
                        read_back.warnings.warn(self.job, "dead", "frontier: skipping unreadable dead letter %r", fp)
                return got

            out += self.retrying(read)
        return sorted(out, key=lambda d: d.at)[:limit] if self.parts > 1 else out

    # ---- observation -------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(COUNT_KEYS, 0)
        bad = 0
        names = (*COUNT_KEYS, "dead", "bad_done")
        for part in range(self.parts):
            # read as bytes, checked: a count another program wrote ("lots", not UTF-8) is 0
            # with one warning, not a worker's crash (read_back)
            run, *vals = self.call_at_bytes(part, "counts")  # [''] when the partition has no run at all
            vals = vals or [b"0"] * (len(COUNT_KEYS) + 2)
            got = read_back.counts(self.job, dict(zip(names, vals, strict=False)))
            mine = {k: int(got.get(k, 0)) for k in COUNT_KEYS}
            if self._run_id is not None:
                run_id = bytes(run).decode("utf-8", "replace")
                self._check_intact(run_id, sum(mine.values()) + int(got.get("dead", 0)), part)
            for k, v in mine.items():
                counts[k] += v
            bad += int(got.get("bad_done", 0))
        self._warn_bad_done([str(bad)])
        return counts

    def _warn_bad_done(self, got: list[str]) -> None:
        """One warning when the done set had a key of another type (written by someone else)."""
        bad = 0
        for x in got:
            try:
                bad += int(x)
            except ValueError:
                bad += 1
        if bad and not self._warned_bad_done:
            self._warned_bad_done = True
            logger.warning(
                "frontier: %d key(s) of job %r's done set held something else (written by another program?) "
                "and were replaced; the URLs they held may be fetched again",
                bad,
                self.job,
            )

    def _check_intact(self, run: str, total: int, part: int = 0) -> None:
        """Within a run, records are only added (a dead letter moves one): a run marker that
        vanished or changed, or fewer records than seen before, means the state is gone
        (checked per partition: a Cluster shard may lose its part alone)."""
        where = f"Redis at {redact_url(self.url)}"
        if part:
            where += f" (partition {part} of {self.parts})"
        if run != self._run_id:
            now = f"run {run} is current" if run else f"the run marker {self.keys[part]}:run is gone"
            raise FrontierFatal(
                f"{where} no longer has job {self.job!r}'s run {self._run_id} ({now}): the server lost "
                "the job's state (restarted without persistence, flushed, or failed over to a replica "
                "that had not caught up), or the job was reset or finished and started again meanwhile. Requests that were only in "
                "Redis are lost, so this worker stops instead of declaring the run finished. Run Redis "
                "with `appendonly yes`, then start the job again"
            )
        high = self._highs.get(part, 0)
        if total < high:
            raise FrontierFatal(
                f"{where}: job {self.job!r} run {run} has {total} records (with dead letters), fewer than the "
                f"{high} seen before: the server lost writes (restarted from an older snapshot, or "
                "failed over to a replica that had not caught up). Requests that were only in Redis are "
                "lost, so this worker stops instead of declaring the run finished. Run Redis with "
                "`appendonly yes`, then start the job again"
            )
        self._highs[part] = total

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
        first: float | None = None
        for part in range(self.parts):
            p = self.run_prefix(part)
            got = self.retrying(partial(self.r.zrange, f"{p}:delayed", 0, 0, withscores=True))
            at = read_back.eligible_time(self.job, got[0][1], self.clock()) if got else None
            if at is not None and (first is None or at < first):
                first = at
        return first

    def status(self) -> Status:
        return redis_status.read_status(self)

    def current_run(self) -> RunInfo | None:
        raw = self.hget_bytes(f"{self.key}:run", "id")  # read back: bytes (see run_prefix)
        return self.run_info(bytes(raw).decode("utf-8", "replace")) if raw else None

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        for part in self.by_part([fingerprint]):
            got = self._get_at(part, fingerprint)
            if got is not None:
                return got
        return None

    def _get_at(self, part: int, fingerprint: str) -> dict[str, Any] | None:
        p = self.run_prefix(part)
        try:
            h = self.retrying(lambda: self.r.hgetall(f"{p}:r:{fingerprint}"))
        except UnicodeDecodeError:  # a field another program wrote that is not UTF-8
            read_back.unreadable_record(self.job, fingerprint, "a field is not UTF-8")
            return None
        if not h:
            if not int(self.call_at(part, "isdone", fingerprint)):
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
