"""A benchmark extension (not part of scrapy-scale): the CPU time CPython's garbage collector
takes in a crawl, from ``gc.callbacks``, kept in the crawl's stats as it goes:

- ``bench/gc/seconds``: process CPU seconds spent inside collections, all generations;
- ``bench/gc/full_seconds``: of which in full (generation-2) collections;
- ``bench/gc/collections``: how many collections ran.

Enabled on every variant by ``python -m benchmarks.bench_suite --gc-meter``.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from scrapy import signals


class GCMeter:
    def __init__(self, stats: Any):
        self.stats = stats
        self.total = self.full = 0.0
        self.n = 0
        self._t0 = 0.0

    @classmethod
    def from_crawler(cls, crawler: Any) -> GCMeter:
        m = cls(crawler.stats)
        crawler.signals.connect(m.start, signal=signals.engine_started)
        crawler.signals.connect(m.stop, signal=signals.engine_stopped)
        return m

    def start(self) -> None:
        gc.callbacks.append(self._cb)

    def stop(self) -> None:
        if self._cb in gc.callbacks:
            gc.callbacks.remove(self._cb)

    def _cb(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.process_time()
            return
        dt = time.process_time() - self._t0
        self.total += dt
        self.n += 1
        if info.get("generation") == 2:
            self.full += dt
        self.stats.set_value("bench/gc/seconds", round(self.total, 4))
        self.stats.set_value("bench/gc/full_seconds", round(self.full, 4))
        self.stats.set_value("bench/gc/collections", self.n)
