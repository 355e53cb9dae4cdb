"""The Redis frontier store: many workers, atomic Lua scripts, Cluster-safe keys.

A job's keys are in partitions by site (:mod:`.partitions`): partition 0 starts with
``scale:{JOB}``, partition i with ``scale:{JOB/pi.N}`` (N chosen so that the partitions'
slots spread evenly; ``scale:{JOB/pi}`` in a job of the first naming); each hash tag is one
Redis Cluster slot, so every script (one partition's keys) runs on a Cluster too. The run-level keys
(run, runs, workers, alive, seeds) are in partition 0 only; each other partition has a
``run`` hash with the run id alone. Below, ``{J}`` is a partition's tag. Keys of one run
live under ``scale:{J}:RUN:`` so starting a new run is one atomic switch; the old run's
keys are unlinked afterwards.

    scale:{J}:run            HASH  current run: id, started, ended, parts (the partition count
                                   and naming, partition 0 only: 12/slot; 12 the first naming)
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
import re
from collections.abc import Sequence
from functools import partial
from typing import Any

import redis

from scrapy_scale.frontier.backends.redis import partitions
from scrapy_scale.frontier.backends.redis.base import SEED_CALL, field_of, glob_escape
from scrapy_scale.frontier.backends.redis.observe import RedisObserve
from scrapy_scale.frontier.store import (
    EnqueueResult,
    Leased,
    NewRequest,
)
from scrapy_scale.shared_values import Refused, text

__all__ = ["RedisStore", "glob_escape"]

logger = logging.getLogger(__name__)


def packs(fingerprint: str) -> tuple[bytes, bytes]:
    """A fingerprint of hex characters packed to bytes, from its 1st and from its 2nd
    character (an odd last character kept as it is), as the scripts key the done set and
    the ready queues with it (lua/queue_entry.lua): packed here, on the worker, not in Lua
    on the Redis server. Empty for another fingerprint (the scripts pack it themselves)."""
    if len(fingerprint) < 8 or not _HEX.fullmatch(fingerprint):
        return b"", b""
    return _pack(fingerprint), _pack(fingerprint[1:])


_HEX = re.compile(r"[0-9a-fA-F]+")


def _pack(hexes: str) -> bytes:
    even = len(hexes) // 2 * 2
    return bytes.fromhex(hexes[:even]) + hexes[even:].encode()


class RedisStore(RedisObserve):
    # ---- hot path --------------------------------------------------------------------

    def part_of(self, r: NewRequest) -> int:
        """A request's partition: where its record already is when this worker holds it
        (an update may name another domain, a redirect's), else its site's."""
        known = self._held.get(r.fingerprint)
        if known is not None and known < self.parts:
            return known
        return partitions.partition_of(r.domain, self.parts)

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        out: list[EnqueueResult | None] = [None] * len(requests)
        for part, idx in partitions.group(requests, self.part_of).items():
            for i in range(0, len(idx), 500):
                chunk = idx[i : i + 500]
                args: list[Any] = [self.clock()]
                for n in chunk:
                    r = requests[n]
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
                        *packs(r.fingerprint),
                    ]
                    if self.parts > 1:
                        if r.held_by:
                            self._held[r.fingerprint] = part
                        elif r.update:
                            self._held.pop(r.fingerprint, None)
                for n, x in zip(chunk, self.call_at(part, "enqueue", *args), strict=True):
                    out[n] = EnqueueResult(x)
        return [x for x in out if x is not None]

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        added = 0
        for part, idx in partitions.group(requests, self.part_of).items():
            for i in range(0, len(idx), SEED_CALL):
                chunk = [requests[n] for n in idx[i : i + SEED_CALL]]
                # one script call per priority in the chunk (seeds have one)
                for p in sorted({r.priority for r in chunk}):
                    args: list[Any] = [self.clock(), str(int(p))]
                    for r in chunk:
                        if r.priority == p:
                            args += (r.fingerprint, r.data, r.domain, *packs(r.fingerprint))
                    added += int(self.call_at(part, "seed", *args))
        return added

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        if self.parts == 1:
            return self._lease_at(0, worker, n, seconds)
        got: dict[int, list[Leased]] = {}

        def ask(part: int, want: int) -> int:
            rows = self._lease_at(part, worker, want, seconds)
            got.setdefault(part, []).extend(rows)
            for x in rows:
                if not x.error:
                    self._held[x.fingerprint] = part
            return sum(1 for x in rows if not x.error)

        self.lease_plan.run(n, ask)
        return partitions.merge(list(got.values()))

    def _lease_at(self, part: int, worker: str, n: int, seconds: float) -> list[Leased]:
        rows = self.call_at(part, "lease", self.clock(), worker, int(n), float(seconds))
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
                    self._dead_letter_at(part, fp, bad)
            out.append(Leased(fp, "", dom, 0, 0, 0.0, 0.0, 0, error=bad))
        return out

    def renew(self, worker: str, seconds: float, fingerprints: Sequence[str] | None = None) -> int:
        if fingerprints is not None and not fingerprints:
            return 0
        until = self.clock() + seconds
        if fingerprints is None:
            return sum(int(self.call_at(i, "renew", worker, until)) for i in range(self.parts))
        return sum(int(self.call_at(i, "renew", worker, until, *fps)) for i, fps in self.by_part(fingerprints).items())

    def ack(self, worker: str, done: Sequence[tuple[str, int]]) -> int:
        if not done:
            return 0
        return self._finish(worker, 3, [(fp, tok, "", "") for fp, tok in done])

    def fail(self, worker: str, failed: Sequence[tuple[str, int, str, str]]) -> int:
        if not failed:
            return 0
        return self._finish(worker, 4, list(failed))

    def _finish(self, worker: str, target: int, rows: list[tuple[str, int, str, str]]) -> int:
        n = 0
        for part, fps in self.by_part([r[0] for r in rows]).items():
            args: list[Any] = [worker, target]
            here = set(fps)
            for fp, tok, cls, reason in rows:
                if fp in here:
                    args += [fp, str(tok), cls, reason, *packs(fp)]
            n += int(self.call_at(part, "finish", *args))
        self._forget([r[0] for r in rows])
        return n

    def _forget(self, fingerprints: Sequence[str] | None) -> None:
        if fingerprints is None:
            self._held.clear()
        else:
            for f in fingerprints:
                self._held.pop(f, None)

    def release(self, worker: str, fingerprints: Sequence[str] | None = None) -> int:
        if fingerprints is not None and not fingerprints:
            return 0
        now = self.clock()
        if fingerprints is None:
            n = sum(int(self.call_at(i, "release", "release", worker, now)) for i in range(self.parts))
        else:
            n = sum(
                int(self.call_at(i, "release", "release", worker, now, *fps))
                for i, fps in self.by_part(fingerprints).items()
            )
        self._forget(fingerprints)
        return n

    def reclaim(self, worker: str | None = None) -> int:
        now = self.clock()
        n = sum(int(self.call_at(i, "release", "reclaim", worker or "", now)) for i in range(self.parts))
        if worker:
            self._forget(None)
        back = int(self.call_script("feed", "recover", now))
        if back:
            logger.warning("frontier: %d feed message(s) taken by workers no longer alive went back to the feed", back)
        return n

    def dead_letter(self, fingerprint: str, reason: str) -> None:
        for part in self.by_part([fingerprint]):
            self._dead_letter_at(part, fingerprint, reason)

    def _dead_letter_at(self, part: int, fingerprint: str, reason: str) -> None:
        self.call_at(part, "dead", fingerprint, reason, self.clock())

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

    # ---- commands ----------------------------------------------------------------------

    def reset(self) -> None:
        self._run_id = None
        old = self.call_script("run", "reset", self.clock())
        self._unlink_run(str(old))
        for key in self.keys[1:]:  # the next start may choose another partition count
            self.retrying(partial(self.r.delete, f"{key}:run"))

    def resolve(self, fingerprints: Sequence[str]) -> int:
        if not fingerprints:
            return 0
        return sum(int(self.call_at(i, "resolve", *fps)) for i, fps in self.by_part(fingerprints).items())

    def requeue(self, cls: str | None = None) -> int:
        n = sum(int(self.call_at(i, "requeue", self.clock(), cls or "")) for i in range(self.parts))
        if n:
            self.reopen_run()
        return n
