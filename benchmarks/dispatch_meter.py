"""A benchmark extension (not part of scrapy-scale): the CPU time a crawl spends sending the
outcome signal (``OutcomeEmitter.send``: the dispatch and every receiver it calls), kept in
the crawl's stats as it goes:

- ``bench/outcome_send/seconds``: CPU seconds of the crawl's main thread inside ``send``;
- ``bench/outcome_send/count``: how many sends.

Thread CPU time (``time.thread_time``), so a loaded machine does not inflate it the way it
does wall time. Enabled on every variant by ``python -m benchmarks.bench_suite --dispatch-meter``.
"""

from __future__ import annotations

import time
from typing import Any


class DispatchMeter:
    def __init__(self, stats: Any):
        self.stats = stats
        self.seconds = 0.0
        self.count = 0

    @classmethod
    def from_crawler(cls, crawler: Any) -> DispatchMeter:
        from scrapy_scale.outcomes.emit import OutcomeEmitter

        meter = cls(crawler.stats)
        inner = OutcomeEmitter.send

        def send(self: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return inner(self, *args, **kwargs)
            finally:
                meter.add(time.thread_time() - t0)

        OutcomeEmitter.send = send  # type: ignore[method-assign]
        return meter

    def add(self, dt: float) -> None:
        self.seconds += dt
        self.count += 1
        self.stats.set_value("bench/outcome_send/seconds", round(self.seconds, 4))
        self.stats.set_value("bench/outcome_send/count", self.count)
