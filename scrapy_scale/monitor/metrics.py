"""The metrics: what a crawl counts and reads, as Prometheus metric families.

:class:`CrawlMetrics` is a subscriber of :data:`scrapy_scale.signals.outcome` (through
the extension) and counts exactly the events :class:`scrapy_scale.outcomes.stats.OutcomeStats`
counts: final outcomes (``scale/outcome/<class>``), retried attempts (``scale/retry/<class>``),
give-ups, attempts per finished request (``scale/retry_depth/<n>``); Scrapy's own downloads
(robots.txt, media: ``internal``) are left out, as the stats keep them apart. Gauges
(queue, slots, pools, browsers) are set from periodic reads by the extension.

It is also a prometheus-client *collector* (the families are built in
:mod:`.exposition`, the one module that needs prometheus-client): registered in a per-crawler
``CollectorRegistry`` (never the global one, never multiprocess mode), it yields the
families with the labels ``job``, ``spider`` and ``worker`` on every sample. Counting is
plain dict arithmetic on the reactor thread (O(1) per outcome); :meth:`collect` (the HTTP
server's thread, a push, the textfile writer) copies the numbers under a lock.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from scrapy_scale.errors import ItemDeadLettered
from scrapy_scale.monitor.domains import TopDomains
from scrapy_scale.monitor.metric_names import FAILURE_CLASSES, QUEUE_STATES
from scrapy_scale.outcomes.model import FailureClass, Outcome

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from prometheus_client.registry import CollectorRegistry


class CrawlMetrics:
    """Counts and gauges of one crawl (one process), and their Prometheus families."""

    def __init__(self, job: str, spider: str, worker: str, top_domains: int = 20):
        self.base = {"job": job, "spider": spider, "worker": worker}
        self.lock = threading.Lock()
        self.domains = TopDomains(top_domains)
        self.started = time.time()
        # counters (only ever grow)
        self.requests: Counter[str] = Counter()  # final outcomes by class
        self.retries: Counter[str] = Counter()  # retried attempts by class
        self.gave_up: Counter[str] = Counter()
        self.depth: Counter[int] = Counter()  # attempts of finished requests
        self.egress_attempts = 0
        self.egress_failures: Counter[str] = Counter()  # failed attempts through an egress, by class
        self.domain_attempts: Counter[str] = Counter()
        self.domain_blocked: Counter[str] = Counter()
        self.domain_rate_limited: Counter[str] = Counter()
        self.items_stored = 0
        self.items_dead_lettered = 0
        # gauges (set by periodic reads; None: not known, not exported)
        self.queue: dict[str, int] | None = None
        self.oldest_pending_age: float | None = None
        self.average_wait: float | None = None
        self.frontier_dead_letters: int | None = None
        self.download_slots: int | None = None
        self.domain_delay: dict[str, float] = {}
        self.browser_contexts: int | None = None
        self.browser_processes: int | None = None
        self.egress_pool: dict[str, int] | None = None
        #: the quality layer's figures, when it is on: items validated / quarantined (counters,
        #: read from its offer), checks failing at its last periodic run (a gauge)
        self.items_validated: int | None = None
        self.items_quarantined: int | None = None
        self.quality_checks_failing: int | None = None

    # ---- the outcome subscriber (reactor thread) -------------------------------------

    def on_outcome(self, outcome: Outcome, **kwargs: Any) -> None:
        if outcome.internal:
            return
        cls = outcome.cls
        with self.lock:
            if outcome.final:
                self.requests[cls.value] += 1
                self.depth[outcome.attempt] += 1
                if outcome.gave_up:
                    self.gave_up[cls.value] += 1
            else:
                self.retries[cls.value] += 1
            if outcome.domain:
                d = self.domains.label(outcome.domain)
                self.domain_attempts[d] += 1
                if cls is FailureClass.BLOCKED:
                    self.domain_blocked[d] += 1
                elif cls is FailureClass.RATE_LIMITED:
                    self.domain_rate_limited[d] += 1
            if outcome.egress is not None:
                self.egress_attempts += 1
                if cls in FAILURE_CLASSES:
                    self.egress_failures[cls.value] += 1

    def on_item_stored(self, **kwargs: Any) -> None:
        with self.lock:
            self.items_stored += 1

    def on_item_failed(self, failure: Any = None, exception: Any = None, **kwargs: Any) -> None:
        """``item_dropped`` (``exception``) / ``item_error`` (``failure``): counts dead letters."""
        exc = exception if exception is not None else getattr(failure, "value", None)
        if isinstance(exc, ItemDeadLettered):
            with self.lock:
                self.items_dead_lettered += 1

    def refresh_domains(self) -> None:
        with self.lock:
            self.domains.refresh()

    # ---- gauges (set by the extension's periodic read) --------------------------------

    def set_frontier(self, status: Mapping[str, Any] | None) -> None:
        with self.lock:
            if status is None:
                self.queue = None
                return
            counts = status.get("counts") or {}
            self.queue = {s: int(counts.get(s, 0)) for s in QUEUE_STATES}
            self.oldest_pending_age = status.get("oldest_pending_age") or 0.0  # none pending: 0
            self.average_wait = status.get("average_wait")
            dead = status.get("dead_letters")
            self.frontier_dead_letters = None if dead is None else int(dead)

    # ---- the collector (any thread) ---------------------------------------------------

    def describe(self) -> list[Metric]:
        return []  # families appear as they get values; no duplicate-name check needed

    def collect(self) -> Iterator[Metric]:
        from scrapy_scale.monitor.exposition import families

        yield from families(self.base, self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """Every number, copied under the lock (JSON-able)."""
        with self.lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "retries": dict(self.retries),
            "gave_up": dict(self.gave_up),
            "depth": dict(self.depth),
            "egress_attempts": self.egress_attempts,
            "egress_failures": dict(self.egress_failures),
            "domain_attempts": dict(self.domain_attempts),
            "domain_blocked": dict(self.domain_blocked),
            "domain_rate_limited": dict(self.domain_rate_limited),
            "items_stored": self.items_stored,
            "items_dead_lettered": self.items_dead_lettered,
            "queue": dict(self.queue) if self.queue is not None else None,
            "oldest_pending_age": self.oldest_pending_age,
            "average_wait": self.average_wait,
            "frontier_dead_letters": self.frontier_dead_letters,
            "download_slots": self.download_slots,
            "domain_delay": dict(self.domain_delay),
            "browser_contexts": self.browser_contexts,
            "browser_processes": self.browser_processes,
            "egress_pool": dict(self.egress_pool) if self.egress_pool is not None else None,
            "started": self.started,
            "items_validated": self.items_validated,
            "items_quarantined": self.items_quarantined,
            "quality_checks_failing": self.quality_checks_failing,
        }

    def registry(self) -> CollectorRegistry:
        """A fresh registry holding only this crawl's metrics (needs prometheus-client)."""
        from prometheus_client.registry import CollectorRegistry

        reg = CollectorRegistry(auto_describe=False)
        reg.register(self)  # type: ignore[arg-type]
        return reg
