"""The lease buffer: what this worker holds ready for the engine.

Leased records and memory-only requests, served by priority (FIFO within one); the
pacer's pick (which buffered request may go now, :mod:`.pacing`) and its deferrals
(leased requests of a site due much later go back to the store, delayed until their
turn); the requests the store cannot hold, kept in memory and deduplicated through a
record leased to this worker; and the due timer, which asks for a sync the moment a
delayed request of this worker becomes eligible. It writes only to the outbox and the
stats; the due timer calls back the ``due`` callable it was given.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from scrapy import Request, Spider

from scrapy_scale import meta_keys
from scrapy_scale import stats_keys as keys
from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.scheduling import pacing
from scrapy_scale.frontier.scheduling.local import LocalQueue, Outbox
from scrapy_scale.frontier.scheduling.scrapy_stats import ScrapyStats
from scrapy_scale.frontier.scheduling.slot_transit import SlotTransit
from scrapy_scale.frontier.scheduling.stats import FrontierStats
from scrapy_scale.frontier.store import EnqueueResult, Leased, NewRequest, domain_of
from scrapy_scale.redact import redact_text

logger = logging.getLogger(__name__)

#: schedule ``fn`` in ``seconds`` on the reactor; returns a call with ``active()`` and ``cancel()``
CallLater = Callable[[float, Callable[[], None]], Any]


@dataclass
class Served:
    """A request taken from the buffer for the engine."""

    request: Request
    #: the record key, when a record of this worker covers it (None: memory only, no record)
    fingerprint: str | None
    #: the lease token of that record
    token: int
    #: earlier attempts the record counts
    attempts: int


def reactor_call_later(seconds: float, fn: Callable[[], None]) -> Any:
    from twisted.internet import reactor  # the one Scrapy installed

    return reactor.callLater(seconds, fn)  # type: ignore[attr-defined,arg-type]


class LeaseBuffer:
    def __init__(
        self,
        outbox: Outbox,
        stats: FrontierStats,
        scrapy_stats: ScrapyStats,
        due: Callable[[], None],
        call_later: CallLater = reactor_call_later,
    ):
        self.outbox = outbox
        self.stats = stats
        self.scrapy_stats = scrapy_stats
        self._due_cb = due
        self._call_later = call_later
        self.queue: LocalQueue[Leased | Request] = LocalQueue()
        #: the pacer (the throttle) asked which buffered requests may go; None: no pacing
        self.pacer: pacing.Pacer | None = None
        #: is a host's download slot full (its requests then wait here, not in the slot); None: unknown
        self.slot_full: Callable[[str], bool] | None = None
        #: requests handed out and not in their download slot yet (counted in slot_full)
        self.transit = SlotTransit()
        #: no more due timers (the scheduler is closing)
        self.closing = False
        self._mem_n = 0
        #: requests kept in memory whose dedup record the next sync writes (by id of its NewRequest)
        self._held_waiting: dict[int, Request] = {}
        #: fingerprint -> lease token of requests kept in memory whose record this worker holds
        self._held_tokens: dict[str, int] = {}
        #: buffered requests the pacer held at its last look
        self._held = 0  # held by the pacer at the last look
        self._busy = 0  # held by a full download slot at the last look
        self._due_timer: Any = None
        self._due_at = math.inf
        self._warned_unserializable = False
        self._warned_scheme = False
        #: requests handed to the engine so far
        self.served = 0

    # ---- what it holds -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.queue)

    def __iter__(self) -> Iterator[Leased | Request]:
        return iter(self.queue)

    def top_priority(self) -> int | None:
        return self.queue.top_priority()

    def ready(self) -> int:
        """Buffered leased requests neither the pacer nor a full download slot held at the
        last look: what a sync's lease is sized by (a buffer of only full sites' requests
        leases more, the other sites' requests are in the store)."""
        return max(0, self.unpaced() - self._busy)

    def unpaced(self) -> int:
        """Buffered leased requests the pacer did not hold at the last look: what starts a
        sync early (a full slot frees within a download, so waiting on one does not: the
        engine asks at every download's end, and a sync each time would cost more than it
        brings)."""
        return max(0, len(self.queue) - self._mem_n - self._held)

    def fingerprints(self) -> list[str]:
        """Fingerprints of the leases the buffer holds (requests kept in memory included)."""
        return [
            x.fingerprint if isinstance(x, Leased) else x.meta.get(meta_keys.FINGERPRINT, "")
            for x in self.queue
            if isinstance(x, Leased) or x.meta.get(meta_keys.FINGERPRINT) in self._held_tokens
        ]

    def clear(self) -> None:
        """Forget everything held (the worker stops; leases are released by the store)."""
        self.queue.clear()
        self._mem_n = 0
        self._held_waiting.clear()
        self._held_tokens.clear()
        self.transit.clear()

    def take_leased(self, leased: list[Leased]) -> None:
        """Buffer what a sync (or a flush) leased, and count the wait."""
        if not leased:
            return
        self.stats.leased(leased, time.time())
        for lz in leased:
            self.queue.push(lz.priority, lz)

    # ---- requests kept in memory ---------------------------------------------------------

    def keep_in_memory(
        self,
        request: Request,
        fp: str,
        update: bool,
        error: codec.CodecError,
        *,
        worker: str,
        lease_seconds: float,
        prior_token: int | None,
    ) -> None:
        """A request the store cannot hold (a value that is not data, or one a record may
        not name): served from memory, deduplicated through a record leased to this worker
        from the start (no request in it), acked as usual; not resumed after a stop.
        ``prior_token``: the lease token of the request it continues (``update``), if
        in flight here."""
        kind = error.type_name if isinstance(error, codec.NotStorable) else "refused"
        self.stats.inc(keys.FRONTIER_UNSERIALIZABLE)
        self.stats.inc(keys.FRONTIER_UNSERIALIZABLE_TYPE + kind)
        self.scrapy_stats.unserializable()
        if isinstance(error, codec.SchemeRefused):
            if not self._warned_scheme:
                self._warned_scheme = True
                logger.warning(
                    "frontier: %s has a URL scheme the frontier does not store (%s); such requests are "
                    "kept in memory only: deduplicated like the others, but a crash or a stop loses those "
                    "not finished (they are dead-lettered). Add the scheme to SCALE_FRONTIER_SCHEMES to "
                    "store them. Counted in scale/frontier/unserializable/refused",
                    redact_text(str(request)[:200]),
                    redact_text(str(error)),
                )
        elif not self._warned_unserializable:
            self._warned_unserializable = True
            logger.warning(
                "frontier: %s holds a value the frontier cannot store (%s); such requests are kept in "
                "memory only: deduplicated like the others, but a crash or a stop loses those not "
                "finished (they are dead-lettered). Put plain data in meta/cb_kwargs (str, numbers, lists, "
                "dicts, bytes, tuples, sets, dates, Decimal, or an Item/dataclass/attrs instance of the "
                "project). Counted by type in scale/frontier/unserializable/*",
                redact_text(str(request)),
                redact_text(str(error)),
            )
        if update:  # a retry/redirect of a request this worker holds: its lease goes on
            if prior_token is not None:
                self._held_tokens[fp] = prior_token
        elif not request.dont_filter:  # dont_filter bypasses dedup (as Scrapy's): no record
            nr = NewRequest(
                fingerprint=fp,
                data=codec.memory_marker(kind),
                domain=domain_of(request.url),
                priority=request.priority,
                held_by=worker,
                held_seconds=lease_seconds,
            )
            self._held_waiting[id(nr)] = request
            self.outbox.append(("enq", nr))
            return
        self._push_memory(request)

    def _push_memory(self, request: Request) -> None:
        self.queue.push(request.priority, request)
        self._mem_n += 1
        self.scrapy_stats.enqueued("memory")

    def held_written(self, ops: list[tuple[str, Any]], results: list[EnqueueResult]) -> None:
        """The store answered the dedup of requests kept in memory: serve the new ones."""
        if not self._held_waiting:
            return
        enqueued = [nr for kind, nr in ops if kind == "enq"]
        for nr, result in zip(enqueued, results, strict=False):
            request = self._held_waiting.pop(id(nr), None) if nr.held_by else None
            if request is not None and result is EnqueueResult.ADDED:
                self._held_tokens[nr.fingerprint] = 0
                self._push_memory(request)

    # ---- handing out ---------------------------------------------------------------------

    def next_entry(self) -> Leased | Request | None:
        """The next buffered entry to hand out: the best one, or with a pacer the best
        whose site is due; leased requests of a site due much later go back to the
        store, delayed until their turn, so they do not fill the buffer."""
        if self.pacer is None and self.slot_full is None:
            return self.queue.pop()
        pick = pacing.take_due(self.queue, self.pacer, time.time(), self.slot_full)
        self._held, self._busy = pick.held, pick.busy
        for lz, turn in pick.defer:
            nr = NewRequest(
                fingerprint=lz.fingerprint,
                data=lz.data,
                domain=lz.domain,
                priority=lz.priority,
                not_before=turn,
                attempts=lz.attempts,
                last_failure=lz.last_failure,
                update=True,
                token=lz.token,  # refused as stale if its lease passed on meanwhile
            )
            self.scrapy_stats.deferral(nr)  # the same request waiting for its turn: not enqueued again
            self.outbox.append(("enq", nr))
            self.stats.inc(keys.FRONTIER_DEFERRED)
            self.sync_at(turn)
        return pick.due

    def serve(self, entry: Leased | Request, spider: Spider | None, rules: codec.RecordRules) -> Served | None:
        """The request of ``entry`` (from :meth:`next_entry`), told to the pacer; None for
        a record that cannot be read (dead-lettered)."""
        self.served += 1
        if isinstance(entry, Request):  # kept in memory only
            self._mem_n -= 1
            self.scrapy_stats.dequeued("memory")
            self._paced(entry, None)
            fp = entry.meta.get(meta_keys.FINGERPRINT)
            if fp in self._held_tokens:  # its record is leased to this worker: acked as usual
                return Served(entry, fp, self._held_tokens.pop(fp), 0)
            return Served(entry, None, 0, 0)
        if entry.error is not None:  # the store already moved it to the dead letters
            logger.warning("frontier: record %s cannot be read, dead-lettered: %s", entry.fingerprint, entry.error)
            self.stats.inc(keys.FRONTIER_DEAD_LETTERED)
            return None
        try:
            request = codec.decode(entry.data, spider, rules)
        except codec.CodecError as e:
            logger.warning("frontier: record %s cannot be read, dead-lettered: %s", entry.fingerprint, e)
            self.outbox.append(("dead", (entry.fingerprint, str(e))))
            self.stats.inc(keys.FRONTIER_DEAD_LETTERED)
            return None
        request.meta[meta_keys.FINGERPRINT] = entry.fingerprint
        self.scrapy_stats.dequeued("disk")
        self._paced(request, entry)
        return Served(request, entry.fingerprint, entry.token, entry.attempts)

    def _paced(self, request: Request, lz: Leased | None) -> None:
        if self.slot_full is not None:
            self.transit.sent(request)
        if self.pacer is not None:
            domain = lz.domain if lz is not None else pacing.entry_domain(request)
            self.pacer.handed_out(request, domain, lz.fingerprint if lz is not None else None)

    # ---- the due timer -------------------------------------------------------------------

    def sync_at(self, when: float) -> None:
        """Sync (and so lease) the moment a delayed request of ours becomes eligible, not
        up to a tick later: a held retry goes out at its time."""
        if self.closing or when >= self._due_at - 0.005:
            return
        if self._due_timer is not None and self._due_timer.active():
            self._due_timer.cancel()
        self._due_at = when
        self._due_timer = self._call_later(max(0.0, when - time.time()) + 0.005, self._fire)

    def _fire(self) -> None:
        self._due_timer, self._due_at = None, math.inf
        self._due_cb()

    def cancel_timer(self) -> None:
        if self._due_timer is not None and self._due_timer.active():
            self._due_timer.cancel()
