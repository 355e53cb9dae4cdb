"""Scrapy glue of the feed journal (:mod:`scrapy_scale.storage.feeds`), owned by the
item pipeline: journal the keys of stored items, re-send a dead process's items to this
crawl's feeds before it crawls, clear the journal when the feeds close cleanly."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from itemadapter import ItemAdapter
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.misc import load_object
from twisted.internet import threads
from twisted.internet.defer import Deferred

from scrapy_scale import compat
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.storage.backends import SQLiteStore, Store, open_store
from scrapy_scale.storage.feeds import Entry, FeedJournal, journal_folder

logger = logging.getLogger(__name__)

#: keys read back from the store per thread round trip while re-sending
CHUNK = 500


class FeedGuard:
    """Every stored item reaches the crawl's feeds at least once (see docs/storage.md)."""

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
        return cls(crawler, exporter, journal, (url, collection, dead, fields), job)

    def stored(self, entries: Iterable[Entry]) -> None:
        """(key, class path) of items just written, before their ``item_scraped`` (so
        before any ack). Raises :class:`~scrapy_scale.storage.feeds.JournalWriteError`."""
        self.journal.add(entries)

    # ---- re-send ---------------------------------------------------------------------------

    def spider_opened(self, spider: Spider) -> Deferred[None] | None:
        orphans = self.journal.orphans()
        if not orphans:
            return None
        return deferred_from_coro(self._resend(orphans, spider))

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
            for path in adopted:
                entries = self.journal.entries_in(path)
                while chunk := list(islice(entries, CHUNK)):
                    docs = await maybe_deferred_to_future(
                        threads.deferToThread(store.get_many, [k for k, _ in chunk], self.job)
                    )
                    for key, class_path in chunk:
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
        if failed:
            self.journal.close()
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
