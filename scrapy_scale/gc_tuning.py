"""``scrapy_scale.gc_tuning.GCTuning``: a cheaper garbage collector for a long crawl.

Measured on the bench crawl (docs/benchmarks.md, "The whole suite vs plain Scrapy": the
collector's own CPU column and the plain-gc variant), CPython's
cyclic garbage collector took about a third of a crawl process's CPU, plain Scrapy
included: every full collection walks every object the process holds, and most of
those are the modules, classes and functions imported at start-up, which never become
garbage. A crawl that holds more objects in flight (items waiting for their commit keep
their response's item tasks alive) pays more per collection.

Once the engine has started, this extension

- collects once and **freezes** what is left (``gc.freeze()``): the start-up heap moves
  to the permanent generation, which no later collection walks (``SCALE_GC_FREEZE``);
- raises the **generation-0 threshold** (``SCALE_GC_THRESHOLD``, default 5,000 instead of
  Python's 700), so young objects are collected less often, each time together.

Nothing is left uncollected that a crawl makes: cycles made after the freeze are found
as before (a little later, at most a few thousand allocations). When the last engine of
the process stops, the heap is unfrozen and the threshold put back. The decisions
(what to change, what to restore) are :class:`GCState`, plain Python over an injectable
``gc`` module.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from scrapy_scale import startup
from scrapy_scale.config import core_settings

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


@dataclass
class GCState:
    """The tuning of one process: applied by the first engine, undone by the last."""

    gc: Any = gc
    active: int = 0
    saved_threshold: tuple[int, ...] | None = None
    frozen: bool = False

    def apply(self, freeze: bool, threshold: int) -> str:
        """Tune the collector for one more engine; returns what was done, for the log."""
        self.active += 1
        if self.active > 1:
            return "already tuned by another crawl in this process"
        done = []
        if freeze:
            self.gc.collect()
            self.gc.freeze()
            self.frozen = True
            done.append(f"start-up heap frozen ({self.gc.get_freeze_count()} objects)")
        if threshold:
            old = tuple(self.gc.get_threshold())
            self.saved_threshold = old
            self.gc.set_threshold(threshold, *old[1:])
            done.append(f"generation-0 threshold {old[0]} -> {threshold}")
        return ", ".join(done) or "nothing to do"

    def release(self) -> None:
        """One engine stopped; the last one puts the collector back as it was."""
        if self.active == 0:
            return
        self.active -= 1
        if self.active:
            return
        if self.saved_threshold is not None:
            self.gc.set_threshold(*self.saved_threshold)
            self.saved_threshold = None
        if self.frozen:
            self.gc.unfreeze()
            self.frozen = False


#: the process's one state (the collector is per process, not per crawler)
STATE = GCState()


class GCTuning:
    """Freeze the start-up heap and collect young objects less often; see the module docstring."""

    def __init__(self, freeze: bool, threshold: int, state: GCState = STATE):
        self.freeze = freeze
        self.threshold = threshold
        self.state = state
        self._applied = False

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> GCTuning:
        s = crawler.settings
        freeze, threshold = core_settings.GC_FREEZE.get(s), core_settings.GC_THRESHOLD.get(s)
        if not freeze and not threshold:
            raise NotConfigured("SCALE_GC_FREEZE is off and SCALE_GC_THRESHOLD is 0")
        ext = cls(freeze, threshold)
        crawler.signals.connect(ext.engine_started, signal=signals.engine_started)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def engine_started(self) -> None:
        if self._applied:
            return
        self._applied = True
        logger.info("garbage collector: %s", self.state.apply(self.freeze, self.threshold))

    def engine_stopped(self) -> None:
        if self._applied:
            self._applied = False
            self.state.release()
