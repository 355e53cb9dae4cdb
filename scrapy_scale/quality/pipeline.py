"""``scrapy_scale.quality.ValidationPipeline``: items are checked before they reach the store.

Placed before ``scrapy_scale.storage.StorePipeline`` (order 800 < 900). An item that misses
a critical field (``SCALE_CRITICAL_FIELDS``) or fails its JSON Schema
(``SCALE_QUALITY_SCHEMAS``) is written to the quarantine collection of the item store
(``SCALE_QUALITY_QUARANTINE``: same SQLite file / MongoDB database, one record per item with
its reasons), counted, and dropped with :class:`QuarantinedDrop`: it never reaches the main
store, and the frontier records its request as failed (``parse_failed``, reason
``item quarantined: ...``), not done. Without critical fields, schemas or content fields the
pipeline does nothing (items pass through untouched).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import threads
from twisted.internet.defer import Deferred

from scrapy_scale import config, startup
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.errors import ItemQuarantined
from scrapy_scale.outcomes import settings as outcomes_settings
from scrapy_scale.quality import settings as S
from scrapy_scale.quality import settings as quality_settings
from scrapy_scale.quality.figures import RunFigures
from scrapy_scale.quality.validate import Validator, content_hash, reason_kind
from scrapy_scale.redact import redact_url
from scrapy_scale.storage import settings as storage_settings
from scrapy_scale.storage.backends import DeadRow, StoreBroken, StoreUnavailable, open_store
from scrapy_scale.storage.dead_letters import clean_text, item_text
from scrapy_scale.storage.pipeline import default_store_url, resolve_run_id
from scrapy_scale.storage.writer import BatchWriter, DeadLettered, Submission

logger = logging.getLogger(__name__)

#: quarantined items logged one by one at WARNING (the rest at DEBUG, counted)
LOG_FIRST = 5


def quarantine_name(settings: Any) -> str:
    return quality_settings.QUARANTINE.get(settings) or (storage_settings.COLLECTION.get(settings) + "_quarantine")


def store_url(settings: Any) -> str:
    return storage_settings.URL.get(settings) or default_store_url(settings)


def figures_of(crawler: Crawler) -> RunFigures:
    """The run's figures this process counts (shared by the pipeline and the report)."""
    ctx = ScaleContext.of(crawler)
    figures = ctx.quality_figures = ctx.shared(RunFigures, RunFigures)  # the metrics read them too
    return figures


class QuarantinedDrop(DropItem, ItemQuarantined):
    """``DropItem`` for a quarantined item: its request counts as failed, not done."""

    def __init__(self, message: str, reason: str):
        super().__init__(message, "INFO")
        self.reason = reason


class ValidationPipeline:
    """Critical fields and JSON Schemas before storage; the rest to quarantine (docs/quality.md)."""

    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        s = crawler.settings
        self.validator = Validator(outcomes_settings.CRITICAL_FIELDS.get(s), quality_settings.SCHEMAS.get(s))
        self.content_fields: list[str] = quality_settings.CONTENT_FIELDS.get(s)
        self.active = bool(self.validator) or bool(self.content_fields)
        self.url = store_url(s)
        self.collection: str = storage_settings.COLLECTION.get(s)
        self.quarantine = quarantine_name(s)
        self.stats = crawler.stats
        self.figures = figures_of(crawler)
        self.figures.content_fields = list(self.content_fields)
        self.ctx = ScaleContext.of(crawler)
        self.writer: BatchWriter | None = None
        self.job = ""
        self.run_id = ""
        self._hashes: set[str] = set()
        self._waiting: dict[int, Deferred[Any]] = {}

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> ValidationPipeline:
        S.check_all(crawler.settings)
        p = cls(crawler)
        if p.quarantine in (p.collection, storage_settings.DEAD_LETTER.get(crawler.settings)):
            raise config.ScaleSettingError(
                "SCALE_QUALITY_QUARANTINE", "must differ from the items and dead-letter collections"
            )
        return p

    def open_spider(self, spider: Spider | None = None) -> None:
        if not self.validator:
            return
        from twisted.internet import reactor

        spider = spider or self.crawler.spider
        self.job = core_settings.JOB.get(self.crawler.settings) or (spider.name if spider else "job")
        self.run_id = resolve_run_id(self.crawler)
        store = open_store(self.url, self.collection, self.quarantine)
        self.writer = BatchWriter(
            store,
            batch_size=100,
            max_latency=0.2,
            retry_max_delay=storage_settings.RETRY_MAX_DELAY.get(self.crawler.settings),
            on_batch=lambda r, results: reactor.callFromThread(self._on_batch, results),  # type: ignore[attr-defined]
            on_fatal=lambda m, subs: reactor.callFromThread(self._on_failed, subs, StoreBroken(m)),  # type: ignore[attr-defined]
            on_abandoned=lambda subs: reactor.callFromThread(  # type: ignore[attr-defined]
                self._on_failed, subs, StoreUnavailable("shutdown while the store is unavailable")
            ),
        )
        self.writer.start()
        logger.info(
            "validating items (critical fields %s%s); quarantine: %s collection %s",
            dict(self.validator.critical) or "none",
            ", JSON Schemas" if self.validator._schemas else "",
            redact_url(self.url),
            self.quarantine,
        )

    async def close_spider(self, spider: Spider | None = None) -> None:
        f = self.figures
        if f.validated:
            self.stats.set_value(K.QUALITY_INVALID_RATE, round(f.quarantined / f.validated, 4))
        if self.writer is None:
            return
        writer = self.writer

        def finish() -> None:
            writer.close()
            writer.store.close()

        await maybe_deferred_to_future(threads.deferToThread(finish))

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        if not self.active:
            return item
        f = self.figures
        if self.content_fields:
            h = content_hash(item, self.content_fields)
            if h is not None:
                if h in self._hashes:
                    f.duplicates_by_content += 1
                    self.stats.inc_value(K.QUALITY_DUPLICATES_CONTENT)
                else:
                    self._hashes.add(h)
        if not self.validator:
            return item
        v = self.validator.check(item)
        f.validated += 1
        self.stats.inc_value(K.QUALITY_VALIDATED)
        prefix = "" if type(item).__name__ not in self.validator.critical else type(item).__name__ + "."
        for name in v.critical:
            f.checked[prefix + name] += 1
        for name in v.missing:
            f.missing[prefix + name] += 1
            self.stats.inc_value(K.QUALITY_MISSING + prefix + name)
        if v.ok:
            return item
        reason = "; ".join(v.reasons)
        f.quarantined += 1
        for r in v.reasons:
            f.invalid[reason_kind(r)] += 1
            self.stats.inc_value(K.QUALITY_INVALID + reason_kind(r))
        self.stats.inc_value(K.QUALITY_QUARANTINED)
        await self._quarantine(item, reason)
        src = self._source(item)
        if f.quarantined <= LOG_FIRST:
            logger.warning("quarantined an item from %s: %s", src.url if src else "?", reason)
        raise QuarantinedDrop(f"quarantined: {reason}", reason)

    async def _quarantine(self, item: Any, reason: str) -> None:
        src = self._source(item)
        url = src.url if src else None
        type_name = type(item).__name__
        text = item_text(item)
        body = {
            "reason": clean_text(reason),
            "callback": clean_text(src.callback if src else None),
            "source_url": clean_text(url),
            "item_type": clean_text(type_name),
            "run_id": self.run_id,
            "job": self.job,
            "item": text,
        }
        ident = hashlib.sha1(json.dumps([self.job, url, src.index if src else None, type_name]).encode()).hexdigest()
        sub = Submission(dead=DeadRow(ident, body), reason=reason)
        d: Deferred[Any] = Deferred()
        self._waiting[id(sub)] = d
        assert self.writer is not None
        self.writer.submit(sub)
        await maybe_deferred_to_future(d)

    def _source(self, item: Any) -> Any:
        """Where the item came from, as the store's spider middleware recorded it (or None)."""
        table = self.ctx.item_sources
        return table.peek(item) if table is not None else None

    def _on_batch(self, results: list[tuple[Submission, Any]]) -> None:
        for sub, result in results:
            d = self._waiting.pop(id(sub), None)
            if d is not None:
                assert isinstance(result, DeadLettered)
                d.callback(result)

    def _on_failed(self, subs: list[Submission], error: Exception) -> None:
        """The quarantine cannot be written: the items fail as not stored (item_error), so the
        frontier does not ack their requests and a resumed crawl fetches them again."""
        logger.error("%d quarantined item(s) could not be written to %s: %s", len(subs), self.quarantine, error)
        for sub in subs:
            d = self._waiting.pop(id(sub), None)
            if d is not None:
                d.errback(error)
