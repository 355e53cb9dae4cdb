"""The frontier's own ``scale/frontier/...`` stats (keys in :mod:`scrapy_scale.stats_keys`).

Plain Python over a Scrapy stats collector: what the store took at a sync (enqueues,
acks, failures, stale acks), what was leased and how long it waited, the job's record
counts by state. Scrapy's ``scheduler/*`` stats are :mod:`.scrapy_stats`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from scrapy_scale import stats_keys as keys
from scrapy_scale.frontier.store import EnqueueResult, Leased


class StoreAnswer(Protocol):
    """What a round of writes got back from the store (a sync's result)."""

    enqueued: list[EnqueueResult]
    acked: int
    failed: int
    stale: int


class SyncAnswer(StoreAnswer, Protocol):
    """What a whole sync got back: the writes, and the upkeep and the feed."""

    seconds: float
    reclaimed: int
    feed_bad: int
    feed_added: int
    feed_known: int


class FrontierStats:
    def __init__(self, stats: Any):
        self.stats = stats
        self._wait_sum = 0.0
        self._wait_n = 0
        self._sync_seconds = 0.0

    def inc(self, key: str, n: int = 1) -> None:
        if n:
            self.stats.inc_value(key, n)

    def set(self, key: str, value: Any) -> None:
        self.stats.set_value(key, value)

    def synced(self, res: SyncAnswer) -> None:
        """One more sync: its time in the store thread, what the store took, the leases
        reclaimed, the feed messages refused and written."""
        self.inc(keys.FRONTIER_SYNCS)
        self._sync_seconds += res.seconds
        self.set(keys.FRONTIER_SYNC_SECONDS, round(self._sync_seconds, 3))
        self.writes(res)
        self.inc(keys.FRONTIER_RECLAIMED, res.reclaimed)
        self.inc(keys.FRONTIER_FEED_REFUSED, res.feed_bad)
        self.inc(keys.FRONTIER_ENQUEUED, res.feed_added)
        self.inc(keys.FRONTIER_DEDUPLICATED, res.feed_known)

    def writes(self, res: StoreAnswer) -> None:
        """What the store took: enqueues, and acks/failures as the store counted them (a
        refused one, whose lease token had passed to another worker, is stale)."""
        self.enqueued(res.enqueued)
        self.inc(keys.FRONTIER_ACKED, res.acked)
        self.inc(keys.FRONTIER_FAILED, res.failed)
        self.inc(keys.FRONTIER_STALE_ACKS, res.stale)

    def enqueued(self, results: Sequence[EnqueueResult]) -> None:
        for r in results:
            if r in (EnqueueResult.ADDED, EnqueueResult.REOPENED):
                self.inc(keys.FRONTIER_ENQUEUED)
            elif r is EnqueueResult.UPDATED:
                self.inc(keys.FRONTIER_UPDATED)
            elif r is EnqueueResult.STALE:  # a retry/deferral whose lease had passed on
                self.inc(keys.FRONTIER_STALE_ACKS)
            else:
                self.inc(keys.FRONTIER_DEDUPLICATED)

    def leased(self, leased: Sequence[Leased], now: float) -> None:
        """``leased`` came in at epoch ``now``: count them and how long they waited."""
        if not leased:
            return
        for lz in leased:
            if lz.error is not None:
                continue
            self._wait_sum += max(0.0, now - lz.eligible_at)
            self._wait_n += 1
        self.inc(keys.FRONTIER_LEASED, len(leased))
        if self._wait_n:
            self.set(keys.FRONTIER_WAIT_AVG, round(self._wait_sum / self._wait_n, 3))

    def counts(self, counts: Mapping[str, int]) -> None:
        """The job's records by state, as the store counted them."""
        for k, v in counts.items():
            self.set(f"{keys.FRONTIER_STATE}{k}", v)
        self.set(keys.FRONTIER_QUEUE_LENGTH, counts["pending"] + counts["delayed"])
