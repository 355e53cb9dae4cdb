"""Scrapy glue shared by the monitor's extensions: one :class:`~.metrics.CrawlMetrics` per
crawler (``ScaleContext.shared(CrawlMetrics, ...)``), subscribed once to the outcome and item
signals, and the reads of what this process holds (download slots, egress pool, browser).

The metrics extension (Prometheus) and the snapshot publisher (``scrapy scale watch``)
both read this one object, so they always show the same numbers.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from scrapy import signals

from scrapy_scale import signals as scale_signals
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.monitor import settings as S
from scrapy_scale.monitor.metrics import CrawlMetrics

logger = logging.getLogger(__name__)


def default_worker() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"


def crawl_metrics(crawler: Any) -> CrawlMetrics:
    """The crawler's metrics (created and subscribed on first use)."""

    def make() -> CrawlMetrics:
        spider = getattr(crawler.spidercls, "name", None) or "-"
        job = core_settings.JOB.get(crawler.settings) or spider
        m = CrawlMetrics(job, spider, default_worker(), S.TOP_DOMAINS.get(crawler.settings))
        sig = crawler.signals
        sig.connect(m.on_outcome, signal=scale_signals.outcome)
        sig.connect(m.on_item_stored, signal=signals.item_scraped)
        sig.connect(m.on_item_failed, signal=signals.item_dropped)
        sig.connect(m.on_item_failed, signal=signals.item_error)
        return m

    return ScaleContext.of(crawler).shared(CrawlMetrics, make)


def set_labels(crawler: Any, m: CrawlMetrics, spider: Any) -> None:
    """At open: the job and worker the frontier chose (when it is the scheduler)."""
    ctx = ScaleContext.of(crawler)
    with m.lock:
        m.base = {"job": ctx.job or m.base["job"], "spider": spider.name, "worker": ctx.worker or m.base["worker"]}


def _count(value: Any) -> int | None:
    if callable(value):
        value = value()
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def refresh(crawler: Any, m: CrawlMetrics) -> None:
    """Name the busiest domains, read the gauges of what this process holds (download slots,
    the egress pool, the browser) and the quality layer's figures (when it is on)."""
    m.refresh_domains()
    engine = crawler.engine
    slots = getattr(getattr(engine, "downloader", None), "slots", None)
    ctx = ScaleContext.of(crawler)
    with m.lock:
        if isinstance(slots, dict):
            m.download_slots = len(slots)
            m.domain_delay = {
                k: float(getattr(v, "delay", 0.0)) for k, v in list(slots.items()) if k in m.domains.named
            }
        pool = ctx.egress_pool
        if pool is not None:
            try:
                m.egress_pool = {str(k): int(v) for k, v in dict(pool.pool_sizes()).items()}
            except Exception:  # noqa: BLE001 - another component's object
                logger.debug("metrics: egress pool sizes unavailable", exc_info=True)
        browser = ctx.browser
        if browser is not None:
            m.browser_contexts = _count(getattr(browser, "contexts", None))
            m.browser_processes = _count(getattr(browser, "processes", None))
        quality = ctx.quality_figures
        validated = int(getattr(quality, "validated", 0) or 0)
        if validated:
            m.items_validated = validated
            m.items_quarantined = int(getattr(quality, "quarantined", 0) or 0)
        failing = ctx.quality_report.failing if ctx.quality_report is not None else None
        if failing is not None:
            m.quality_checks_failing = len(failing)
