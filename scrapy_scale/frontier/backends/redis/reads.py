"""What the Redis frontier store reads back (:class:`RedisReads`): counts with the
lost-data check, the next eligible time, dead letters, one record, the jobs known; each
summed or merged over the job's partitions (:mod:`.partitions`). Status is :mod:`.status`."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import redis

from scrapy_scale.frontier.backends import read_back
from scrapy_scale.frontier.backends.redis.connection import RedisConnection
from scrapy_scale.frontier.backends.redis.runs import RedisRuns
from scrapy_scale.frontier.store import COUNT_KEYS, DeadLetter, State, Summary, Want
from scrapy_scale.redact import redact_url
from scrapy_scale.shared_values import Refused, finite, loads

logger = logging.getLogger(__name__)


class RedisReads:
    """Reads of one job's records; ``runs`` keeps the run the counts are checked against."""

    def __init__(self, conn: RedisConnection, runs: RedisRuns):
        self.conn = conn
        self.runs = runs
        #: the one warning about done-set keys of another type was given
        self._warned_bad_done = False

    def summary(self, want: Want, limit: int = 100) -> Summary:
        """Every part but STATUS (:mod:`.status`, read by the store)."""
        if want is Want.COUNTS:
            return Summary(counts=self.counts())
        if want is Want.NEXT_ELIGIBLE:
            return Summary(next_eligible_at=self.next_eligible_at())
        if want is Want.DEAD_LETTERS:
            return Summary(dead_letters=self.dead_letters(limit))
        return Summary(dead_letter_count=self.dead_letter_count())

    def dead_letter_count(self) -> int:
        def count(part: int) -> int:
            p = self.conn.run_prefix(part)
            return int(self.conn.retrying(lambda: self.conn.r.hlen(f"{p}:dead")))

        return sum(count(i) for i in range(self.conn.parts))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        out: list[DeadLetter] = []
        for part in range(self.conn.parts):
            p = self.conn.run_prefix(part)

            def read(p: str = p) -> list[DeadLetter]:
                fps = self.conn.r.zrange(f"{p}:deadz", 0, limit - 1)
                if not fps:
                    return []
                got = []
                for fp, raw in zip(fps, self.conn.r.hmget(f"{p}:dead", fps), strict=True):
                    try:
                        d = loads(raw) if raw else None
                    except Refused:
                        d = None
                    at = finite(d.get("at"), 0.0) if isinstance(d, dict) else None
                    if isinstance(d, dict) and at is not None:
                        got.append(DeadLetter(fp, str(d.get("reason", "")), str(d.get("data", "")), at))
                    elif raw:
                        read_back.warnings.warn(
                            self.conn.job, "dead", "frontier: skipping unreadable dead letter %r", fp
                        )
                return got

            out += self.conn.retrying(read)
        return sorted(out, key=lambda d: d.at)[:limit] if self.conn.parts > 1 else out

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(COUNT_KEYS, 0)
        bad = 0
        names = (*COUNT_KEYS, "dead", "bad_done")
        # every partition's counts in one pipeline (one round trip per node)
        replies = self.conn.call_many([(part, "counts", ()) for part in range(self.conn.parts)], raw=True)
        for part, reply in enumerate(replies):
            # read as bytes, checked: a count another program wrote ("lots", not UTF-8) is 0
            # with one warning, not a worker's crash (read_back)
            run, *vals = reply  # [''] when the partition has no run at all
            vals = vals or [b"0"] * (len(COUNT_KEYS) + 2)
            got = read_back.counts(self.conn.job, dict(zip(names, vals, strict=False)))
            mine = {k: int(got.get(k, 0)) for k in COUNT_KEYS}
            if self.runs.watched is not None:
                run_id = bytes(run).decode("utf-8", "replace")
                self.runs.check_intact(run_id, sum(mine.values()) + int(got.get("dead", 0)), part)
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
                self.conn.job,
            )

    def durability_warning(self) -> str | None:
        """Neither AOF nor RDB snapshots (CONFIG GET, where the server allows it)."""
        try:
            cfg: dict[str, str] = {}
            for name in ("appendonly", "save"):
                cfg.update(self.conn.r.config_get(name))
        except redis.RedisError as e:  # CONFIG disabled or renamed (managed Redis): cannot tell
            logger.debug("Redis persistence unknown (CONFIG GET refused: %s)", e)
            return None
        if cfg.get("appendonly") == "no" and not (cfg.get("save") or "").strip():
            return (
                f"Redis at {redact_url(self.conn.url)} has no persistence (appendonly no, no RDB snapshots): "
                "a restart of it loses the job's frontier. Run it with `appendonly yes` for a crawl "
                "that survives a Redis restart"
            )
        return None

    def next_eligible_at(self) -> float | None:
        first: float | None = None
        for part in range(self.conn.parts):
            p = self.conn.run_prefix(part)
            got = self.conn.retrying(partial(self.conn.r.zrange, f"{p}:delayed", 0, 0, withscores=True))
            at = read_back.eligible_time(self.conn.job, got[0][1], self.conn.clock()) if got else None
            if at is not None and (first is None or at < first):
                first = at
        return first

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        for part in self.conn.by_part([fingerprint]):
            got = self._get_at(part, fingerprint)
            if got is not None:
                return got
        return None

    def _get_at(self, part: int, fingerprint: str) -> dict[str, Any] | None:
        p = self.conn.run_prefix(part)
        try:
            h = self.conn.retrying(lambda: self.conn.r.hgetall(f"{p}:r:{fingerprint}"))
        except UnicodeDecodeError:  # a field another program wrote that is not UTF-8
            read_back.unreadable_record(self.conn.job, fingerprint, "a field is not UTF-8")
            return None
        if not h:
            if not int(self.conn.call_at(part, "isdone", fingerprint)):
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
        return read_back.redis_record(self.conn.job, fingerprint, h)

    def known_jobs(self) -> list[str]:
        names = set()
        for key in self.conn.r.scan_iter(match="scale:{*}:runs", count=1000):
            names.add(key[len("scale:{") : -len("}:runs")])
        return sorted(names)
