"""Scrapy's ``scheduler/*`` stats, written by the frontier with Scrapy's meaning.

Scrapy's scheduler counts, per request it accepts (not a duplicate the dupefilter
dropped), ``scheduler/enqueued`` and ``scheduler/enqueued/disk`` (persisted, with
``JOBDIR``) or ``scheduler/enqueued/memory``; per request it hands to the engine
``scheduler/dequeued`` and ``.../disk`` or ``.../memory``; and
``scheduler/unserializable`` for a request it could not persist. Dashboards and
Spidermon monitors read them. Here every request is persisted in the frontier store
(``disk``), except those kept in memory only (``memory``, and ``unserializable``).

The frontier's dedup is answered by the store at the next sync, so a request counts
as enqueued once the store took it: a new or reopened record, or a retry or redirect
that updated its record. A request the pacer sent back to the store to wait for its
turn (``scale/frontier/deferred``) is the same request, not a new one. Plain Python
over a stats collector; no reactor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapy_scale import stats_keys as K
from scrapy_scale.frontier.store import EnqueueResult

#: store answers that mean the request was accepted (Scrapy: not dropped as a duplicate)
TAKEN = (EnqueueResult.ADDED, EnqueueResult.REOPENED, EnqueueResult.UPDATED)


class ScrapyStats:
    def __init__(self, stats: Any):
        self.stats = stats
        #: ids of the enqueue ops that are pacer deferrals (not counted), until written
        self._deferrals: set[int] = set()

    def deferral(self, op: Any) -> None:
        self._deferrals.add(id(op))

    def enqueued(self, where: str, n: int = 1) -> None:
        if n:
            self.stats.inc_value(K.SCRAPY_SCHEDULER_ENQUEUED, n)
            self.stats.inc_value(K.SCRAPY_SCHEDULER_ENQUEUED_IN + where, n)

    def dequeued(self, where: str) -> None:
        self.stats.inc_value(K.SCRAPY_SCHEDULER_DEQUEUED)
        self.stats.inc_value(K.SCRAPY_SCHEDULER_DEQUEUED_FROM + where)

    def unserializable(self) -> None:
        self.stats.inc_value(K.SCRAPY_SCHEDULER_UNSERIALIZABLE)

    def written(self, ops: Sequence[tuple[str, Any]], results: Sequence[EnqueueResult], feed_added: int = 0) -> None:
        """The store answered a sync's (or a flush's) enqueues, in op order, then the
        feed's requests: count the persisted ones it took. Requests kept in memory
        (``held_by``) are counted when they are served from memory."""
        enq = [nr for kind, nr in ops if kind == "enq"]
        n = 0
        for nr, result in zip(enq, results, strict=False):
            if id(nr) in self._deferrals:
                self._deferrals.discard(id(nr))
                continue
            if result in TAKEN and not nr.held_by:
                n += 1
        n += sum(1 for r in results[len(enq) :] if r in TAKEN) + feed_added
        self.enqueued("disk", n)

    def clear(self) -> None:
        self._deferrals.clear()
