"""Feed messages into records, in the store thread (``SCALE_FRONTIER_FEED``, docs/frontier.md).

Runs of plain URL seeds take the fast path (:class:`..records.seeding.UrlSeeds`: the records the
codec would make); the others are decoded as requests (:func:`..records.codec.request_from_feed`)
and fingerprinted with a fingerprinter of the crawler's class built for this thread.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.utils.misc import build_from_crawler

from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.records.seeding import UrlSeeds
from scrapy_scale.frontier.store import EnqueueResult, FrontierStore, NewRequest
from scrapy_scale.redact import redact_text

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class FeedPull:
    """What one pull from the feed did."""

    def __init__(self) -> None:
        self.enqueued: list[EnqueueResult] = []
        self.bad = 0
        #: plain URL feed seeds written with enqueue_new: new ones, known ones
        self.added = 0
        self.known = 0
        #: the feed had at least as many messages as asked for
        self.full = False


class FeedReader:
    def __init__(self, crawler: Crawler, spider: Spider | None, rules: codec.RecordRules):
        self.crawler = crawler
        self.spider = spider
        self.rules = rules
        self.fingerprinter = crawler.request_fingerprinter
        self._thread_fp: Any = None

    def pull(self, store: FrontierStore, worker: str, n: int) -> FeedPull:
        """Take up to ``n`` feed messages and enqueue them, in order. The messages stay in
        this worker's taken list until they are written (then ``feed_done``): a sync that
        fails here takes the same ones again next time (duplicates are deduplicated)."""
        res = FeedPull()
        msgs = store.take_feed(worker, n)
        res.full = len(msgs) >= n
        seeds = self._plain_seeds
        runs: list[tuple[bool, list[NewRequest]]] = []
        for msg in msgs:
            nr = seeds.from_feed(msg) if seeds is not None else None
            plain = nr is not None
            if nr is None:
                try:
                    r = codec.request_from_feed(msg, self.spider, self.rules)
                    fp = self._fingerprinter().fingerprint(r).hex()
                    nr = codec.new_request(r, fingerprint=fp, spider=self.spider, rules=self.rules)
                except codec.CodecError as e:
                    logger.warning(
                        "frontier: feed message refused: %s (%.200r)", redact_text(str(e)), redact_text(str(msg))
                    )
                    res.bad += 1
                    continue
            if not runs or runs[-1][0] != plain:
                runs.append((plain, []))
            runs[-1][1].append(nr)
        if runs:
            store.reopen_run()
        for plain, run in runs:
            if plain:
                added = store.enqueue_new(run)
                res.added += added
                res.known += len(run) - added
            else:
                res.enqueued += store.enqueue(run)
        if msgs:
            store.feed_done(worker)
        return res

    @functools.cached_property
    def _plain_seeds(self) -> UrlSeeds | None:
        """The fast path for plain URL feed messages, when the crawler fingerprints requests
        with Scrapy's default fingerprinter (another may not give the seed's fingerprint)."""
        from scrapy.utils.request import RequestFingerprinter

        return UrlSeeds(self.rules) if type(self.fingerprinter) is RequestFingerprinter else None

    def _fingerprinter(self) -> Any:
        """A fingerprinter of the crawler's class for the store thread (its cache
        is not shared with the reactor thread's)."""
        if self._thread_fp is None:
            try:
                self._thread_fp = build_from_crawler(type(self.fingerprinter), self.crawler)
            except Exception:  # noqa: BLE001 - a custom class that cannot be built twice
                self._thread_fp = self.fingerprinter
        return self._thread_fp
