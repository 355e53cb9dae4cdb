"""The add-on: ``ADDONS = {"scrapy_scale.Addon": 0}`` turns on every component.

Each component stays usable alone in the classic settings dicts; the add-on only
fills those dicts and sets defaults at the ``addon`` priority, so a project's own
settings win, and it validates every ``SCALE_*`` setting once at startup.
"""

from __future__ import annotations

from typing import Any

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from scrapy_scale import config, startup
from scrapy_scale.config import core_settings

#: (component priority dict, component path, order): enabled by the add-on unless
#: the project already lists the component (a project disables one with None).
COMPONENTS: list[tuple[str, str, int]] = [
    ("EXTENSIONS", "scrapy_scale.config.check.SettingsCheck", 0),
    # NotConfigured when SCALE_GC_FREEZE is off and SCALE_GC_THRESHOLD is 0
    ("EXTENSIONS", "scrapy_scale.gc_tuning.GCTuning", 0),
    ("EXTENSIONS", "scrapy_scale.monitor.summary.RunSummary", 0),
    # NotConfigured unless an export mode is set (SCALE_METRICS_PORT / _PUSHGATEWAY / _TEXTFILE)
    ("EXTENSIONS", "scrapy_scale.monitor.extension.MetricsExtension", 0),
    ("EXTENSIONS", "scrapy_scale.monitor.progress.ProgressLog", 0),
    ("EXTENSIONS", "scrapy_scale.monitor.worker_status.SnapshotPublisher", 0),
    ("DOWNLOADER_MIDDLEWARES", "scrapy_scale.outcomes.OutcomeDownloaderMiddleware", 550),
    ("SPIDER_MIDDLEWARES", "scrapy_scale.outcomes.OutcomeSpiderMiddleware", 45),
    ("EXTENSIONS", "scrapy_scale.outcomes.record.OutcomeLog", 0),
    ("EXTENSIONS", "scrapy_scale.throttle.Throttle", 0),
    ("ITEM_PIPELINES", "scrapy_scale.quality.ValidationPipeline", 800),
    ("EXTENSIONS", "scrapy_scale.quality.QualityReport", 0),
    ("EXTENSIONS", "scrapy_scale.quality.Snapshots", 0),
    ("ITEM_PIPELINES", "scrapy_scale.storage.StorePipeline", 900),
    ("SPIDER_MIDDLEWARES", "scrapy_scale.storage.StoreSpiderMiddleware", 50),
    # before the outcome middleware's not-before guard (550), which holds the requests of a
    # domain without an available egress; before HttpProxyMiddleware (750)
    ("DOWNLOADER_MIDDLEWARES", "scrapy_scale.egress.EgressMiddleware", 540),
]

#: components enabled only when their setting is set (else they would raise NotConfigured)
REQUIRES: dict[str, str] = {"scrapy_scale.egress.EgressMiddleware": "SCALE_EGRESSES"}

#: Scrapy built-ins that an enabled component supersedes: set to None.
DISABLES: list[tuple[str, str]] = [
    # superseded by scrapy_scale.outcomes (classify once, retry per class)
    ("DOWNLOADER_MIDDLEWARES", "scrapy.downloadermiddlewares.retry.RetryMiddleware"),
]

#: single-valued settings the add-on sets; a project's own value wins
SINGLE: dict[str, Any] = {
    # polite by default: robots.txt honoured, a few requests per site at a time
    "ROBOTSTXT_OBEY": True,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
    # Scrapy (2.13+, asyncio reactor) starts CONCURRENT_ITEMS tasks for every response,
    # whatever it yields (scrapy.utils.asyncio._parallel_asyncio, a per-response bound):
    # at its default of 100, making them was the largest single cost of the bench crawl
    # (a page yields one item or a few dozen links); 16 still lets a listing's items wait on
    # the store together (docs/benchmarks.md, "The whole suite vs plain Scrapy": plain
    # Scrapy with 16 alone, the plain-items variant, 2.03x its pages/s at 100)
    "CONCURRENT_ITEMS": 16,
    # the persisted, lease-based frontier (SQLite by default; SCALE_FRONTIER_URL)
    "SCHEDULER": "scrapy_scale.frontier.Scheduler",
}


class Addon:
    """Scrapy add-on enabling all of scrapy-scale."""

    def update_settings(self, settings: BaseSettings) -> None:
        with startup.reporting():
            config.load_declarations()  # SCALE_ENABLED lives in a declaring module
            if not core_settings.ENABLED.get(settings):
                return
            config.validate_all(settings)
        for name, value in SINGLE.items():
            settings.set(name, value, priority="addon")
        for dict_name, path, order in COMPONENTS:
            if path in REQUIRES and settings.get(REQUIRES[path]) is None:
                continue
            settings.setdefault_in_component_priority_dict(dict_name, load_object(path), order)
        for dict_name, path in DISABLES:
            cls = load_object(path)
            if any(v is not None and _same(k, cls) for k, v in settings.getdict(dict_name).items()):
                continue  # the project lists it itself: its choice wins (the outcome middleware warns)
            settings.set_in_component_priority_dict(dict_name, cls, None)


def _same(key: Any, cls: type) -> bool:
    try:
        return (load_object(key) if isinstance(key, str) else key) is cls
    except (ImportError, ValueError, AttributeError, NameError):
        return False
