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
        # What a store call did in the partitions that answered while another partition's
        # call failed, for the caller's retry of the same writes (it puts them back and
        # sends them again): a request's answer (by the identity of its NewRequest, kept
        # alive here), rows leased, acks finished. Without them the retry would be
        # answered "duplicate" for a request that this worker added (a request kept in
        # memory only would be dropped), leases would wait for their expiry, acks would
        # be counted stale.
        self._answered: dict[int, tuple[NewRequest, EnqueueResult]] = {}
        self._leased_back: list[Leased] = []
        self._finished: dict[tuple[Any, ...], int] = {}

    def enqueue(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        if not self._answered:  # no earlier call failed part-way: the common case
            return self._enqueue_calls(requests)
        out: list[EnqueueResult | None] = [None] * len(requests)
        todo: list[NewRequest] = []
        at: list[int] = []
        kept: dict[int, tuple[NewRequest, EnqueueResult]] = {}
        for n, r in enumerate(requests):
            memo = self._answered.pop(id(r), None)
            if memo is not None and memo[0] is r:  # written by a call whose sibling failed
                out[n] = memo[1]
                kept[id(r)] = memo
            else:
                todo.append(r)
                at.append(n)
        try:
            answers = self._enqueue_calls(todo)
        except Exception:
            self._answered.update(kept)  # for the next retry, with what this one added
            raise
        for n, x in zip(at, answers, strict=True):
            out[n] = x
        self._answered.clear()  # a retry comes first (in order): what it did not take is moot
        return [x for x in out if x is not None]

    def _enqueue_calls(self, requests: Sequence[NewRequest]) -> list[EnqueueResult]:
        if not requests:
            return []
        calls: list[tuple[int, str, list[Any]]] = []
        chunks: list[list[int]] = []
        for part, idx in partitions.group(requests, self.conn.part_of).items():
            for i in range(0, len(idx), 500):
                chunk = idx[i : i + 500]
                chunks.append(chunk)
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
        answered: dict[int, Any] = {}
        try:
            replies = self.conn.call_many(calls, answered=answered)
        except Exception:
            for c, got in answered.items():
                for n, x in zip(chunks[c], got, strict=True):
                    self._answered[id(requests[n])] = (requests[n], EnqueueResult(x))
            raise
        out: list[EnqueueResult | None] = [None] * len(requests)
        for chunk, got in zip(chunks, replies, strict=True):
            for n, x in zip(chunk, got, strict=True):
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
        back: list[Leased] = []
        if self._leased_back:  # leased beside a failed partition: handed out first
            back, self._leased_back = self._leased_back[:n], self._leased_back[n:]
            n -= sum(1 for x in back if not x.error)
            if n <= 0:
                return back
        if self.conn.parts == 1:
            return back + self._lease_at(0, worker, n, seconds)
        got: dict[int, list[Leased]] = {}

        def ask_all(asks: list[tuple[int, int]]) -> list[int]:
            now = self.conn.clock()
            calls = [(part, "lease", [now, worker, int(want), float(seconds)]) for part, want in asks]
            answered: dict[int, Any] = {}
            try:
                replies = self.conn.call_many(calls, answered=answered)
            except Exception:
                # leased to this worker in the partitions that answered: handed out by the
                # next lease, not left to expire
                for c, rows in answered.items():
                    ask(asks[c][0], rows)
                self._leased_back = back + partitions.merge(list(got.values())) + self._leased_back
                raise
            return [ask(part, rows) for (part, _), rows in zip(asks, replies, strict=True)]

        def ask(part: int, replies: Any) -> int:
            rows = self._read_lease(part, replies)
            got.setdefault(part, []).extend(rows)
            for x in rows:
                if not x.error:
                    self.conn.held[x.fingerprint] = part
            return sum(1 for x in rows if not x.error)

        self.conn.lease_plan.run_batched(n, ask_all)
        return back + partitions.merge(list(got.values()))

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
        if fps is None and (change is Settle.RELEASED or (change is Settle.RECLAIMED and worker)):
            self._leased_back = []  # back to pending with the worker's other leases
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
        # a call finished by an earlier try whose sibling failed is not sent again
        done: list[int | None] = [None] * len(calls)
        if self._finished:
            done = [self._finished.pop(tuple(args), None) for _, _, args in calls]
        send = [c for c, d in zip(calls, done, strict=True) if d is None]
        answered: dict[int, Any] = {}
        try:
            replies = self.conn.call_many(send, answered=answered)
        except Exception:
            self._finished.update((tuple(send[i][2]), int(x)) for i, x in answered.items())
            self._finished.update((tuple(c[2]), d) for c, d in zip(calls, done, strict=True) if d is not None)
            raise
        n = sum(int(x) for x in replies) + sum(d for d in done if d is not None)
        self._finished.clear()
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
