"""The Redis frontier's records (:class:`RedisRecords`): enqueue, seeds in bulk, lease
(over the partitions, :class:`.partitions.LeasePlan`), every change of records handed back
(:meth:`RedisRecords.settle`), requeue, and the seed feed; each one Lua script call per
partition touched (:mod:`.lua`), a call's partitions in one pipeline
(:meth:`.connection.RedisConnection.call_many`: one round trip per Redis node)."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from scrapy_scale.frontier.backends.redis import partitions
from scrapy_scale.frontier.backends.redis.connection import SEED_CALL, RedisConnection, field_of
from scrapy_scale.frontier.store import EnqueueResult, Leased, NewRequest, Settle, Settled
from scrapy_scale.shared_values import Refused, text

logger = logging.getLogger(__name__)

#: the finish script's target state of a settled lease
_FINISH = {Settle.DONE: 3, Settle.FAILED: 4}


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


class RedisRecords:
    """The records of one job, over its partitions."""

    def __init__(self, conn: RedisConnection):
        self.conn = conn

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        calls: list[tuple[int, str, list[Any]]] = []
        order: list[int] = []
        for part, idx in partitions.group(requests, self.conn.part_of).items():
            for i in range(0, len(idx), 500):
                chunk = idx[i : i + 500]
                order += chunk
                args: list[Any] = [self.conn.clock()]
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
                    if self.conn.parts > 1:
                        if r.held_by:
                            self.conn.held[r.fingerprint] = part
                        elif r.update:
                            self.conn.held.pop(r.fingerprint, None)
                calls.append((part, "enqueue", args))
        # one pipeline for every partition's calls (one round trip per node)
        out: list[EnqueueResult | None] = [None] * len(requests)
        replies = [x for got in self.conn.call_many(calls) for x in got]
        for n, x in zip(order, replies, strict=True):
            out[n] = EnqueueResult(x)
        return [x for x in out if x is not None]

    def enqueue_new(self, requests: Sequence[NewRequest]) -> int:
        added = 0
        for part, idx in partitions.group(requests, self.conn.part_of).items():
            for i in range(0, len(idx), SEED_CALL):
                chunk = [requests[n] for n in idx[i : i + SEED_CALL]]
                # one script call per priority in the chunk (seeds have one)
                for p in sorted({r.priority for r in chunk}):
                    args: list[Any] = [self.conn.clock(), str(int(p))]
                    for r in chunk:
                        if r.priority == p:
                            args += (r.fingerprint, r.data, r.domain, *packs(r.fingerprint))
                    added += int(self.conn.call_at(part, "seed", *args))
        return added

    def lease(self, worker: str, n: int, seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        if self.conn.parts == 1:
            return self._lease_at(0, worker, n, seconds)
        got: dict[int, list[Leased]] = {}

        def ask_all(asks: list[tuple[int, int]]) -> list[int]:
            now = self.conn.clock()
            calls = [(part, "lease", [now, worker, int(want), float(seconds)]) for part, want in asks]
            return [ask(part, rows) for (part, _), rows in zip(asks, self.conn.call_many(calls), strict=True)]

        def ask(part: int, replies: Any) -> int:
            rows = self._read_lease(part, replies)
            got.setdefault(part, []).extend(rows)
            for x in rows:
                if not x.error:
                    self.conn.held[x.fingerprint] = part
            return sum(1 for x in rows if not x.error)

        self.conn.lease_plan.run_batched(n, ask_all)
        return partitions.merge(list(got.values()))

    def _lease_at(self, part: int, worker: str, n: int, seconds: float) -> list[Leased]:
        return self._read_lease(
            part, self.conn.call_at(part, "lease", self.conn.clock(), worker, int(n), float(seconds))
        )

    def _read_lease(self, part: int, rows: Any) -> list[Leased]:
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
                    self.dead_letter_at(part, fp, bad)
            out.append(Leased(fp, "", dom, 0, 0, 0.0, 0.0, 0, error=bad))
        return out

    def settle(self, worker: str | None, change: Settle, rows: Sequence[Settled] | None, seconds: float = 0.0) -> int:
        conn = self.conn
        now = conn.clock()
        fps = None if rows is None else [r.fingerprint for r in rows]
        if change in _FINISH:
            return self._finish(worker or "", _FINISH[change], rows or ())
        if change is Settle.DEAD:
            for r in rows or ():
                for part in conn.by_part([r.fingerprint]):
                    self.dead_letter_at(part, r.fingerprint, r.reason)
            return 0
        if change is Settle.RESOLVED:
            return sum(int(conn.call_at(i, "resolve", *f)) for i, f in conn.by_part(fps or []).items())
        if change is Settle.RECLAIMED:
            calls = [(i, "release", ["reclaim", worker or "", now]) for i in range(conn.parts)]
            n = sum(int(x) for x in conn.call_many(calls))
            if worker:
                conn.forget(None)
            back = int(conn.call_script("feed", "recover", now))
            if back:
                logger.warning(
                    "frontier: %d feed message(s) taken by workers no longer alive went back to the feed", back
                )
            return n
        # RELEASED, RENEWED: the worker's leases, those listed or all
        script, first = (
            ("renew", [worker, now + seconds]) if change is Settle.RENEWED else ("release", ["release", worker, now])
        )
        if fps is None:
            n = sum(int(x) for x in conn.call_many([(i, script, first) for i in range(conn.parts)]))
        else:
            n = sum(int(x) for x in conn.call_many([(i, script, [*first, *f]) for i, f in conn.by_part(fps).items()]))
        if change is Settle.RELEASED:
            conn.forget(fps)
        return n

    def _finish(self, worker: str, target: int, rows: Sequence[Settled]) -> int:
        calls: list[tuple[int, str, list[Any]]] = []
        for part, fps in self.conn.by_part([r.fingerprint for r in rows]).items():
            args: list[Any] = [worker, target]
            here = set(fps)
            for r in rows:
                if r.fingerprint in here:
                    args += [r.fingerprint, str(r.token), r.cls, r.reason, *packs(r.fingerprint)]
            calls.append((part, "finish", args))
        n = sum(int(x) for x in self.conn.call_many(calls))
        self.conn.forget([r.fingerprint for r in rows])
        return n

    def dead_letter_at(self, part: int, fingerprint: str, reason: str) -> None:
        self.conn.call_at(part, "dead", fingerprint, reason, self.conn.clock())

    def requeue_failed(self, cls: str | None) -> int:
        return sum(int(self.conn.call_at(i, "requeue", self.conn.clock(), cls or "")) for i in range(self.conn.parts))

    # ---- feeders -----------------------------------------------------------------------

    @property
    def feed_key(self) -> str:
        return f"{self.conn.key}:seeds"

    def taken_key(self, worker: str) -> str:
        """The list of feed messages ``worker`` took and has not written yet."""
        return f"{self.feed_key}:taken:{worker}"

    def take_feed(self, worker: str, n: int) -> list[str]:
        """Up to ``n`` feed messages, taken. Read as bytes: a message that is not UTF-8 must
        not fail the read (UnicodeDecodeError failed every sync, the message staying taken);
        it is passed on as bytes, and the codec refuses it with its warning."""
        out: list[Any] = []
        for m in self.conn.call_at_bytes(0, "feed", "take", worker, int(n)) or []:
            try:
                out.append(text(m))
            except Refused:
                out.append(m)
        return out

    def feed_done(self, worker: str) -> None:
        self.conn.call_script("feed", "done", worker)
