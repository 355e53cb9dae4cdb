"""Scrapy glue of the feed journal (:mod:`scrapy_scale.storage.feeds`), owned by the
item pipeline: journal the keys of stored items, re-send a dead process's items to this
crawl's feeds before it crawls, clear the journal when the feeds close cleanly."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import threads
from twisted.internet.defer import Deferred

from scrapy_scale import compat, settings_core
from scrapy_scale.storage.backends import SQLiteStore, Store, open_store
from scrapy_scale.storage.feeds import FeedJournal, journal_folder

logger = logging.getLogger(__name__)

#: keys read back from the store per thread round trip while re-sending
CHUNK = 500
STATS = "scale/store/"


class FeedGuard:
    """Every stored item reaches the crawl's feeds at least once (see docs/storage.md)."""

    def __init__(self, crawler: Crawler, exporter: Any, journal: FeedJournal, store_args: tuple[Any, ...]):
        self.crawler = crawler
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
        journal = FeedJournal(journal_folder(s.get("JOBDIR") or settings_core.STATE_DIR.get(s), job))
        journal.open()
        return cls(crawler, exporter, journal, (url, collection, dead, fields))

    def stored(self, keys: Iterable[str]) -> None:
        """Keys of items just written, before their ``item_scraped`` (so before any ack)."""
        self.journal.add(keys)

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
        sent = unknown = 0
        meta = set(self.store_args[3].values())
        store: Store | None = None
        try:
            store = await maybe_deferred_to_future(threads.deferToThread(self._reader))
            for path in adopted:
                keys = self.journal.keys_in(path)
                while chunk := list(islice(keys, CHUNK)):
                    docs = await maybe_deferred_to_future(threads.deferToThread(_get_all, store, chunk))
                    for doc in docs:
                        if doc is None:
                            unknown += 1
                            continue
                        item = {k: v for k, v in doc.items() if k not in meta and k != "_id"}
                        compat.export_to_feeds(self.exporter, item, spider)
                        sent += 1
                self.resent_files.append(path)
        except Exception as e:  # noqa: BLE001 - kept for the next run, never a crashed start
            logger.warning("feeds: could not re-send the items of a crashed run (%r); the next run tries again", e)
        finally:
            if store is not None:
                await maybe_deferred_to_future(threads.deferToThread(store.close))
        self.crawler.stats.inc_value(STATS + "feed_resent", sent)
        logger.info(
            "feeds: re-sent %d item(s) stored by a crashed run of this job (%d journal(s)) to this run's feeds",
            sent,
            len(adopted),
        )
        bad = self.journal.bad_lines
        if bad or unknown:
            logger.warning(
                "feeds: skipped %d unreadable journal line(s) and %d key(s) the item store does not have "
                "while re-sending (%s)",
                bad,
                unknown,
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


def _get_all(store: Store, keys: list[str]) -> list[dict[str, Any] | None]:
    return [store.get(k) for k in keys]
