"""Scrapy glue: the item pipeline.

``StorePipeline`` turns each item into a keyed document (its source noted by
:class:`~scrapy_scale.storage.sources.StoreSpiderMiddleware`), hands it to the batch
writer thread, and returns from ``process_item`` only once the item is committed
(or dead-lettered, then ``DropItem``, see :mod:`~scrapy_scale.storage.dead_letters`):
Scrapy's ``item_scraped`` means "stored".
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

from itemadapter import ItemAdapter
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import threads
from twisted.internet.defer import Deferred

from scrapy_scale import compat, config, exitcode, startup
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.redact import redact_url
from scrapy_scale.storage import settings as S
from scrapy_scale.storage.backends import (
    MongoStore,
    SQLiteStore,
    Store,
    StoreBroken,
    StoreUnavailable,
    open_store,
)
from scrapy_scale.storage.dead_letters import (
    SHORT_REPR,
    DeadLetteredDrop,
    NotAnItem,
    reason_kind,
)
from scrapy_scale.storage.feed_guard import FeedGuard
from scrapy_scale.storage.feeds import JournalWriteError
from scrapy_scale.storage.keys import KeyRules
from scrapy_scale.storage.sources import sources_of
from scrapy_scale.storage.submissions import Submissions
from scrapy_scale.storage.writer import BatchReport, BatchWriter, DeadLettered, Result, Stored, Submission

logger = logging.getLogger(__name__)


def default_store_url(settings: Any) -> str:
    folder = core_settings.state_folder(settings)
    return "sqlite:///" + os.path.abspath(os.path.join(folder, "items.sqlite"))


def resolve_run_id(crawler: Crawler) -> str:
    """The frontier's run when there is one (it opens before the pipelines and registers its
    run number in the crawler's :class:`~scrapy_scale.context.ScaleContext`; a resumed run
    keeps its number), else a new id for this process (``20261130T090000Z-1a2b3c4d``),
    registered there for the other components."""
    ctx = ScaleContext.of(crawler)
    if ctx.run_id is None:
        ctx.run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
    return str(ctx.run_id)


class StorePipeline:
    """Idempotent, durable item storage (see docs/storage.md)."""

    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        s = crawler.settings
        self.stats = crawler.stats
        self.url: str = S.URL.get(s) or default_store_url(s)
        ctx = ScaleContext.of(crawler)
        ctx.store_url = redact_url(self.url)
        ctx.store = self  # offers duplicates_in_run (context.StoreView)
        self.collection: str = S.COLLECTION.get(s)
        self.dead_collection: str = S.DEAD_LETTER.get(s) or f"{self.collection}_dead_letter"
        self.batch_size: int = S.BATCH_SIZE.get(s)
        self.max_latency: float = S.MAX_LATENCY.get(s)
        self.max_pending: int = S.MAX_PENDING.get(s)
        self.retry_max_delay: float = S.RETRY_MAX_DELAY.get(s)
        self.fields: dict[str, str] = S.FIELDS.get(s)
        #: items into keyed documents or dead letters, and the keys of this run
        self.submissions = Submissions(
            KeyRules(S.ITEM_KEY.get(s)), self.fields, S.MAX_ITEM_BYTES.get(s), S.DROP_DUPLICATES.get(s), self.stats
        )
        self.sources = sources_of(crawler)
        self.sources.consumed = True
        self.store: Store | None = None
        self.writer: BatchWriter | None = None
        self._pending = 0
        #: id(submission) -> the Deferred its process_item waits on
        self._waiting: dict[int, Deferred[Result]] = {}
        self._paused = False
        self._latency_sum = 0.0
        self._outage_logged = 0.0
        #: the feed journal, when Scrapy's feeds are on (see storage/feeds.py)
        self.feeds: FeedGuard | None = None
        #: a fatal error closed the spider already
        self._closing = False
        crawler.signals.connect(self._forget, signal=signals.item_dropped)
        crawler.signals.connect(self._forget, signal=signals.item_error)

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> StorePipeline:
        for setting in S.__dict__.values():
            if isinstance(setting, config.Setting):
                setting.get(crawler.settings)  # fail at startup on a bad value
        pipeline = cls(crawler)
        if pipeline.dead_collection == pipeline.collection:
            # dead letters (another schema) in the items table can never be written: the crawl would stall
            raise config.ScaleSettingError(
                "SCALE_STORE_DEAD_LETTER", f"must differ from SCALE_STORE_COLLECTION ({pipeline.collection!r})"
            )
        pipeline._open_store()
        return pipeline

    # ---- lifecycle -------------------------------------------------------------

    def _open_store(self) -> None:
        """Open the store and check it, at startup: a bad SCALE_STORE_URL stops the crawl
        before the engine opens (a failing open_spider makes Scrapy log tracebacks of its
        own, e.g. CoreStats' on a spider_closed with no spider_opened)."""
        self.store = open_store(self.url, self.collection, self.dead_collection, self.fields)
        if isinstance(self.store, SQLiteStore):
            # a local file: a wrong path must stop the crawl now, not pause it forever
            try:
                self.store.open()
            except (StoreUnavailable, StoreBroken, OSError) as e:
                raise config.ScaleSettingError("SCALE_STORE_URL", f"cannot open the SQLite file: {e}") from None
        elif isinstance(self.store, MongoStore):
            # wrong credentials or rights would otherwise be retried forever, batch after batch
            try:
                self.store.check_access()
            except StoreBroken as e:
                raise config.ScaleSettingError(
                    "SCALE_STORE_URL",
                    str(e).removeprefix("SCALE_STORE_URL: ") + "; fix the user/password "
                    "(and authSource) in the URL, or the user's roles (readWrite on the database)",
                ) from None
            except StoreUnavailable as e:
                raise config.ScaleSettingError(
                    "SCALE_STORE_URL", f"{e}; start MongoDB there, or fix SCALE_STORE_URL"
                ) from None

    @startup.reports_setting_errors
    def open_spider(self, spider: Spider | None = None) -> None:
        spider = spider or self.crawler.spider
        job = core_settings.JOB.get(self.crawler.settings) or (spider.name if spider else "job")
        self.submissions.opened(job, resolve_run_id(self.crawler))
        from twisted.internet import reactor

        if self.store is None:
            self._open_store()
        assert self.store is not None
        self.writer = BatchWriter(
            self.store,
            self.batch_size,
            self.max_latency,
            self.retry_max_delay,
            on_batch=lambda r, results: reactor.callFromThread(self._on_batch, r, results),  # type: ignore[attr-defined]
            on_unavailable=lambda e, n, d: reactor.callFromThread(self._on_unavailable, e, n, d),  # type: ignore[attr-defined]
            on_fatal=lambda m, subs: reactor.callFromThread(self._on_fatal, m, subs),  # type: ignore[attr-defined]
            on_abandoned=lambda subs: reactor.callFromThread(self._on_abandoned, subs),  # type: ignore[attr-defined]
        )
        self.writer.start()
        self.feeds = FeedGuard.attach(self.crawler, job, self.url, self.collection, self.dead_collection, self.fields)
        logger.info(
            "storing items in %s (collection %s, run %s)",
            redact_url(self.url),
            self.collection,
            self.submissions.run_id,
        )

    async def close_spider(self, spider: Spider | None = None) -> None:
        if self.writer is None:
            return
        writer, store = self.writer, self.store

        def finish() -> None:  # blocking: off the reactor thread
            writer.close()
            if store is not None:
                store.close()

        await maybe_deferred_to_future(threads.deferToThread(finish))
        if self.submissions.keys_in_run:
            self.stats.set_value(K.STORE_KEYS_IN_RUN, self.submissions.keys_in_run)
        written = self.stats.get_value(K.STORE_WRITTEN, 0)
        if written:
            self.stats.set_value(K.STORE_ITEM_LATENCY_AVG, round(self._latency_sum / written, 4))
        if writer.error is not None:
            logger.error("the store writer failed: %r", writer.error)

    @property
    def duplicates_in_run(self) -> int:
        """Items whose key was already written in this run (``context.StoreView``)."""
        return self.submissions.duplicates_in_run

    def _forget(self, item: Any, **kw: Any) -> None:
        """An item another pipeline dropped never reaches us: forget its source."""
        self.sources.pop(item)

    # ---- items -----------------------------------------------------------------

    async def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        src = self.sources.pop(item)
        d: Deferred[Result] = Deferred()
        sub = self.submissions.of(item, src)
        if sub is None:  # duplicate dropped
            raise DropItem("duplicate: key already written in this run (SCALE_STORE_DROP_DUPLICATES)")
        assert self.writer is not None, "StorePipeline used before open_spider"
        self._waiting[id(sub)] = d
        self.writer.submit(sub)
        self._pending += 1
        if self._pending >= self.max_pending and not self._paused and self.crawler.engine:
            self._paused = True
            self.crawler.engine.pause()
            self.stats.inc_value(K.STORE_PAUSES)
            logger.warning("store is behind (%d items waiting): crawl paused", self._pending)
        result = await maybe_deferred_to_future(d)
        if isinstance(result, Stored) and self.feeds is not None:
            self.feeds.crawled(item, result.key)
        if isinstance(result, DeadLettered):
            if not ItemAdapter.is_item(item):
                raise NotAnItem(result.reason, result.reason)
            try:
                repr(item)
                level = None
            except RecursionError:  # Scrapy's "Dropped: ..." line would fail to format the item
                logger.warning("Dropped: dead-lettered: %s\n%s", result.reason, SHORT_REPR.repr(item))
                level = "DEBUG"
            raise DeadLetteredDrop(f"dead-lettered: {result.reason}", result.reason, level)
        return item

    def _on_batch(self, r: BatchReport, results: list[tuple[Submission, Result]]) -> None:
        """On the reactor thread, once per written batch: stats, then resolve its items."""
        self._count_batch(r)
        self._pending -= len(results)
        if self._paused and self._pending <= self.max_pending // 2:
            self._paused = False
            engine = self.crawler.engine
            if engine is not None:
                engine.unpause()
                compat.wake_engine(self.crawler)
            logger.info("store caught up (%d items waiting): crawl resumed", self._pending)
        if self.feeds is not None:  # journaled before item_scraped, hence before any ack
            try:
                self.feeds.stored((r.key, sub.item_class) for sub, r in results if isinstance(r, Stored))
            except JournalWriteError as e:
                self._fail(
                    f"{e}; closing the spider (the items of this batch are stored but not acked: "
                    "their pages are crawled again by the next run)",
                    "the feed journal cannot be written",
                    [sub for sub, _ in results],
                    "feed_journal_failed",
                    counted=True,
                )
                return
        for sub, result in results:
            if isinstance(result, DeadLettered):
                self.stats.inc_value(K.STORE_DEAD_LETTER_REASON + reason_kind(result.reason))
            d = self._waiting.pop(id(sub), None)
            if d is not None:
                d.callback(result)

    # ---- stats -----------------------------------------------------------------

    def _count_batch(self, r: BatchReport) -> None:
        st = self.stats
        st.inc_value(K.STORE_BATCHES)
        st.inc_value(K.STORE_WRITTEN, r.inserted + r.updated)
        st.inc_value(K.STORE_INSERTED, r.inserted)
        st.inc_value(K.STORE_UPDATED, r.updated)
        if r.dead:
            st.inc_value(K.STORE_DEAD_LETTERED, r.dead)
        if r.retries:
            st.inc_value(K.STORE_RETRIES, r.retries)
        st.inc_value(K.STORE_WRITE_SECONDS, round(r.write_seconds, 6))  # type: ignore[arg-type]
        st.max_value(K.STORE_WRITE_LATENCY_MAX, round(r.write_seconds, 6))
        st.max_value(K.STORE_ITEM_LATENCY_MAX, round(r.max_item_latency, 6))
        self._latency_sum += r.max_item_latency * (r.inserted + r.updated)
        if self._outage_logged:
            logger.warning("store is available again after %.1fs", time.monotonic() - self._outage_logged)
            self._outage_logged = 0.0

    def _on_fatal(self, message: str, subs: list[Submission]) -> None:
        """The store can never take these writes: fail the waiting items (item_error;
        see docs/storage.md about their acks) and end the crawl loudly instead of looping."""
        self._fail(
            f"SCALE_STORE_URL store cannot be written, closing the spider: {message}",
            f"the item store cannot be written (SCALE_STORE_URL): {message[:200]}",
            subs,
            "store_failed",
            stat=message,
        )

    def _fail(
        self, text: str, why: str, subs: list[Submission], reason: str, counted: bool = False, stat: str = ""
    ) -> None:
        """Fail the waiting items of ``subs`` (nothing acked), close the spider with
        ``reason``, exit status 1 (logged once). ``counted``: ``subs`` were already taken
        off ``_pending``."""
        if self.stats.get_value(K.STORE_FAILED) is None:
            logger.error("%s", text)
            exitcode.request(1, why, self.crawler)
            self.stats.set_value(K.STORE_FAILED, (stat or text)[:500])
        if not counted:
            self._pending -= len(subs)
        for sub in subs:
            d = self._waiting.pop(id(sub), None)
            if d is not None:
                d.errback(StoreBroken(text))
        engine = self.crawler.engine
        if engine is not None:
            if self._paused:
                self._paused = False
                engine.unpause()
            if engine.spider is not None and not self._closing:
                self._closing = True
                deferred_from_coro(engine.close_spider_async(reason=reason))

    def _on_abandoned(self, subs: list[Submission]) -> None:
        """Shutdown while the store is down: the waiting items fail (item_error, logged and
        counted) and the crawl can end."""
        text = f"shutdown while the store {redact_url(self.url)} is unavailable: item not stored"
        if subs:
            logger.error("%d items not stored: %s", len(subs), text)
        self.stats.inc_value(K.STORE_ABANDONED, len(subs))
        self._pending -= len(subs)
        for sub in subs:
            d = self._waiting.pop(id(sub), None)
            if d is not None:
                d.errback(StoreUnavailable(text))

    def _on_unavailable(self, error: str, attempt: int, delay: float) -> None:
        engine = self.crawler.engine
        if engine is not None and not engine.running and self.writer is not None:
            # Ctrl-C / crawler.stop(): do not hold the shutdown hostage to the outage
            logger.warning(
                "shutting down while the store is unavailable (%s): giving up on %d items", error, self._pending
            )
            self.writer.abandon()
            return
        if not self._outage_logged:
            self._outage_logged = time.monotonic()
        if attempt == 1 or attempt % 10 == 0:
            logger.warning(
                "store unavailable (attempt %d, next in %.1fs; %d items waiting): %s",
                attempt,
                delay,
                self._pending,
                error,
            )
