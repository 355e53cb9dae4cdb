"""The Prometheus metric families of :class:`~.metrics.CrawlMetrics`' numbers (names,
types, help, labels): the only module of the metrics that imports prometheus-client."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from scrapy_scale.monitor.metric_names import DEPTH_BUCKETS, FAILURE_CLASSES, PREFIX
from scrapy_scale.outcomes.model import FailureClass


def families(base: dict[str, str], s: dict[str, Any]) -> Iterator[Metric]:
    names = list(base)
    values = list(base.values())

    def counter(
        name: str, doc: str, label: str | None, data: Mapping[str, int], keys: tuple[str, ...] = ()
    ) -> CounterMetricFamily:
        fam = CounterMetricFamily(PREFIX + name, doc, labels=names + ([label] if label else []))
        if label is None:
            fam.add_metric(values, float(data.get("", 0)))
            return fam
        for k in sorted(set(keys) | set(data)):
            fam.add_metric(values + [k], float(data.get(k, 0)))
        return fam

    def gauge(
        name: str, doc: str, value: float | None, label: str | None = None, data: Mapping[str, float] | None = None
    ) -> Iterator[GaugeMetricFamily]:
        if label is None:
            if value is not None:
                fam = GaugeMetricFamily(PREFIX + name, doc, labels=names)
                fam.add_metric(values, float(value))
                yield fam
            return
        if data is None:
            return
        fam = GaugeMetricFamily(PREFIX + name, doc, labels=names + [label])
        for k in sorted(data):
            fam.add_metric(values + [k], float(data[k]))
        yield fam

    classes = tuple(c.value for c in FailureClass)
    yield counter(
        "requests",
        "Requests finished, by outcome class (one final outcome per request).",
        "class",
        s["requests"],
        classes,
    )
    yield counter(
        "retries",
        "Attempts that were retried, by the class of the failed attempt.",
        "class",
        s["retries"],
        tuple(c.value for c in FAILURE_CLASSES),
    )
    yield counter(
        "gave_up", "Requests of a retryable class not retried further (budget spent or refused).", "class", s["gave_up"]
    )
    depth = s["depth"]
    buckets, acc, total_attempts = [], 0, 0
    for bound in DEPTH_BUCKETS:
        acc = sum(n for a, n in depth.items() if a <= bound)
        buckets.append((str(bound), float(acc)))
    count = sum(depth.values())
    total_attempts = sum(a * n for a, n in depth.items())
    buckets.append(("+Inf", float(count)))
    hist = HistogramMetricFamily(
        PREFIX + "request_attempts", "Attempts a finished request took (retry depth).", labels=names
    )
    hist.add_metric(values, buckets, float(total_attempts))
    yield hist
    yield counter(
        "items_stored",
        "Items stored (durably written when the scrapy-scale store is on).",
        None,
        {"": s["items_stored"]},
    )
    yield counter(
        "items_dead_lettered",
        "Items that could not be stored and went to the dead letters.",
        None,
        {"": s["items_dead_lettered"]},
    )
    if s["items_validated"] is not None:
        yield counter(
            "items_validated",
            "Items checked by the validation pipeline before storage.",
            None,
            {"": s["items_validated"]},
        )
        yield counter(
            "items_quarantined",
            "Items put in quarantine by the validation pipeline (never stored).",
            None,
            {"": s["items_quarantined"] or 0},
        )
    yield from gauge(
        "quality_checks_failing", "Quality checks failing at their last periodic run.", s["quality_checks_failing"]
    )
    yield counter(
        "egress_attempts", "Attempts that went through an egress (a proxy).", None, {"": s["egress_attempts"]}
    )
    yield counter(
        "egress_failures", "Failed attempts through an egress, by outcome class.", "class", s["egress_failures"]
    )
    yield counter(
        "domain_attempts",
        "Attempts per domain (the busiest domains; the rest as other).",
        "domain",
        s["domain_attempts"],
    )
    yield counter("domain_blocked", "Blocked responses (403, block pages) per domain.", "domain", s["domain_blocked"])
    yield counter(
        "domain_rate_limited",
        "Rate-limited responses (429, 503 with Retry-After) per domain.",
        "domain",
        s["domain_rate_limited"],
    )
    yield from gauge(
        "domain_delay_seconds",
        "Current download delay of the named domains' slots.",
        None,
        "domain",
        s["domain_delay"] or None,
    )
    yield from gauge(
        "queue_requests", "Frontier records of the job by state (job-wide, every worker's).", None, "state", s["queue"]
    )
    yield from gauge(
        "queue_oldest_pending_age_seconds",
        "Seconds since the oldest eligible pending record became eligible (job-wide).",
        s["oldest_pending_age"] if s["queue"] is not None else None,
    )
    yield from gauge(
        "queue_wait_average_seconds",
        "Mean seconds a request waited eligible before it was leased (job-wide, this run).",
        s["average_wait"] if s["queue"] is not None else None,
    )
    yield from gauge(
        "frontier_dead_letters",
        "Frontier records that could not be read (job-wide).",
        s["frontier_dead_letters"] if s["queue"] is not None else None,
    )
    yield from gauge("download_slots", "Open downloader slots of this process.", s["download_slots"])
    yield from gauge("browser_contexts", "Live browser contexts of this process.", s["browser_contexts"])
    yield from gauge("browser_processes", "Live browser processes of this process.", s["browser_processes"])
    yield from gauge("egress_pool_size", "Egresses in the pool by state.", None, "state", s["egress_pool"])
    yield from gauge("start_time_seconds", "When this crawl process started (Unix time).", s["started"])
