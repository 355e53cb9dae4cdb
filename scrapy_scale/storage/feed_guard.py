"""Scrapy glue of the feed journal (:mod:`scrapy_scale.storage.feeds`), owned by the
item pipeline: journal the keys of stored items and where local feed files begin, cut a
dead process's local feed files back and re-send its items to this crawl's feeds before
it crawls, clear the journal when the feeds close cleanly."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from itemadapter import ItemAdapter
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import load_object
from twisted.internet import threads

from scrapy_scale import compat
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.storage.backends import SQLiteStore, Store, open_store
from scrapy_scale.storage.feed_files import FeedFile, cut_back, storage_for
from scrapy_scale.storage.feeds import Entry, FeedJournal, JournalWriteError, journal_folder

logger = logging.getLogger(__name__)

#: keys read back from the store per thread round trip while re-sending
CHUNK = 500


class FeedGuard:
    """Every stored item reaches the crawl's feeds: a local file exactly once, others at
    least once (see docs/storage.md)."""

    def __init__(
        self, crawler: Crawler, exporter: Any, journal: FeedJournal, store_args: tuple[Any, ...], job: str = ""
    ):
        self.crawler = crawler
        self.job = job
        self.exporter = exporter
        self.journal = journal
        self.store_args = store_args
        #: adopted journals whose items were all re-sent (deleted with ours at a clean close)
        self.resent_files: list[Any] = []
        #: keys re-sent by this run: an item crawled again under one of them is not written
        #: to the feeds a second time
        self.resent_keys: set[str] = set()
        #: id -> the item of this crawl whose key was re-sent already (see :meth:`crawled`)
        self._kept: dict[int, Any] = {}
        #: a feed file's start could not be journaled: keep the journal at close (re-sent next run)
        self.unrecorded = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.feeds_closed, signal=signals.feed_exporter_closed)

    @classmethod
    def attach(
        cls, crawler: Crawler, job: str, url: str, collection: str, dead: str, fields: Mapping[str, str]
    ) -> FeedGuard | None:
        """A guard when Scrapy's FeedExporter is enabled (``FEEDS`` or ``-o``), else None."""
        exporter = compat.feed_exporter(crawler)
        if exporter is None:
            return None
        s = crawler.settings
        journal = FeedJournal(journal_folder(core_settings.state_folder(s), job))
        journal.open()
        guard = cls(crawler, exporter, journal, (url, collection, dead, fields), job)
        compat.journal_local_feeds(exporter, storage_for(guard.feed_opened))
        compat.route_feed_items(crawler, exporter, guard.item_scraped)
        return guard

    def stored(self, entries: Iterable[Entry]) -> None:
        """(key, class path) of items just written, before their ``item_scraped`` (so
        before any ack). Raises :class:`~scrapy_scale.storage.feeds.JournalWriteError`."""
        self.journal.add(entries)

    def crawled(self, item: Any, key: str) -> None:
        """An item of this crawl was stored under ``key`` (before its ``item_scraped``): when
        this run re-sent that key already (a killed run stored it, its page was not acked),
        the feeds hold it, and it is not written again."""
        if key in self.resent_keys:
            self._kept[id(item)] = item

    def item_scraped(self, item: Any, spider: Spider) -> None:
        """In place of the FeedExporter's own ``item_scraped`` handler."""
        if self._kept.get(id(item)) is item:
            del self._kept[id(item)]
            self.crawler.stats.inc_value(K.STORE_FEED_KEPT_RESENT)
            return
        compat.export_to_feeds(self.exporter, item, spider)

    def feed_opened(self, feed: FeedFile) -> None:
        """A local feed file opened, nothing written yet: journal where its writing begins."""
        try:
            self.journal.add_feed_file(feed)
        except JournalWriteError as e:
            if not self.unrecorded:  # nothing is lost: a WARNING (a journal that takes no entry stops the crawl)
                logger.warning(
                    "feeds: %s; after a kill -9 of this run its items are re-sent to the feeds, and may "
                    "appear twice in %s",
                    e,
                    feed.path,
                )
            self.unrecorded = True

    # ---- re-send ---------------------------------------------------------------------------

    async def spider_opened(self, spider: Spider) -> None:
        orphans = self.journal.orphans()
        if orphans:
            await self._resend(orphans, spider)

    def _cut_back(self, adopted: list[Any]) -> None:
        """Cut the adopted journals' local feed files back to where their runs began (before
        anything is re-sent), then void those records: they are never cut again."""
        files = [f for p in adopted for f in self.journal.feed_files_in(p)]
        if not files:
            return
        report = cut_back(files)
        errors = self.journal.void_feed_files(adopted)
        if report or errors:
            logger.warning(
                "feeds: a killed run of this job had written to local feed files: %s; its stored items are "
                "re-sent below, once each%s",
                report.text() or "nothing left to change",
                f" (could not mark them done: {'; '.join(errors)})" if errors else "",
            )

    def _reader(self) -> Store:
        store = open_store(*self.store_args)
        if isinstance(store, SQLiteStore):
            store.open()
        return store

    async def _resend(self, orphans: list[Any], spider: Spider) -> None:
        adopted = [p for p in (self.journal.adopt(o) for o in orphans) if p is not None]
        if not adopted:
            return
        sent = unknown = refused = plain = 0
        fields = self.store_args[3]
        meta = set(fields.values())
        store: Store | None = None
        try:
            store = await maybe_deferred_to_future(threads.deferToThread(self._reader))
            self._cut_back(adopted)
            for path in adopted:
                entries = self.journal.entries_in(path)
                while chunk := list(islice(entries, CHUNK)):
                    docs = await maybe_deferred_to_future(
                        threads.deferToThread(store.get_many, [k for k, _ in chunk], self.job)
                    )
                    for key, class_path in chunk:
                        if key in self.resent_keys:
                            continue  # in two journals (stored by a killed run, then by its killed resume)
                        doc = docs.get(key)
                        if doc is None or doc.get(fields["job"]) != self.job:
                            unknown += 1  # not in the store, or another job's item: not ours to send
                            continue
                        item, built = rebuild(
                            {k: v for k, v in doc.items() if k not in meta and k != "_id"}, class_path
                        )
                        plain += not built
                        if not compat.feeds_accepting(self.exporter, item):
                            refused += 1  # every feed filters it out: nothing to send
                            continue
                        compat.export_to_feeds(self.exporter, item, spider)
                        self.resent_keys.add(key)
                        sent += 1
                self.resent_files.append(path)
        except Exception as e:  # noqa: BLE001 - kept for the next run, never a crashed start
            logger.warning("feeds: could not re-send the items of a crashed run (%r); the next run tries again", e)
        finally:
            if store is not None:
                await maybe_deferred_to_future(threads.deferToThread(store.close))
        self.crawler.stats.inc_value(K.STORE_FEED_RESENT, sent)
        logger.info(
            "feeds: re-sent %d item(s) stored by a crashed run of this job (%d journal(s)) to this run's feeds"
            " (%d filtered out by every feed)",
            sent,
            len(adopted),
            refused,
        )
        bad = self.journal.bad_lines
        if bad or unknown or plain:
            logger.warning(
                "feeds: skipped %d unreadable journal line(s) and %d key(s) the item store does not have "
                "(for this job) while re-sending; %d item(s) re-sent as dicts, their class could not be "
                "rebuilt (%s)",
                bad,
                unknown,
                plain,
                self.journal.folder,
            )

    # ---- clean close -----------------------------------------------------------------------

    def feeds_closed(self) -> None:
        stats = self.crawler.stats.get_stats() if self.crawler.stats else {}
        failed = sum(v for k, v in stats.items() if k.startswith("feedexport/failed_count/") and isinstance(v, int))
        if failed or self.unrecorded:
            self.journal.close()
            if failed:
                logger.warning(
                    "feeds: %d feed(s) failed to store; their items are re-sent by the next run of this job", failed
                )
            return
        self.journal.clear(self.resent_files)


def rebuild(fields: dict[str, Any], class_path: str | None) -> tuple[Any, bool]:
    """The item as its class (``class_path``, journaled when it was stored), and whether
    that worked; else the fields as a dict. The class is looked up only in a module this
    crawl has already imported: the journal is read-back state and never makes us import
    (run) a module."""
    if class_path is None or class_path == "builtins.dict":
        return fields, True
    module = class_path.rpartition(".")[0]
    try:
        if module not in sys.modules:
            raise ImportError(module)
        cls = load_object(class_path)
        if not isinstance(cls, type) or not ItemAdapter.is_item_class(cls):
            raise TypeError(class_path)
        return cls(**fields), True
    except Exception:  # noqa: BLE001 - not importable, not an item class, fields it does not take
        return fields, False
