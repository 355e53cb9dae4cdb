"""What each worker publishes for ``scrapy scale watch`` / ``status``, next to its frontier.

Every ``SCALE_WATCH_INTERVAL`` seconds (default 5; 0 = off) :class:`SnapshotPublisher`
(enabled by the add-on) writes this worker's numbers -- requests, retries and items by
class, its recent rates, the named domains' attempts / blocks / rate limits, the egress
pool by state, live browser contexts and download slots -- as one small JSON document,
valid for three intervals, to the backend of the job's frontier:

- Redis frontier: the hash ``scale:{JOB}:monitor``, one field per worker (the job's
  hash tag, so Redis Cluster keeps it with the job);
- SQLite frontier: ``monitor/<JOB>/<worker>.json`` next to the ``frontier.db`` file.

So the command reads them from any machine that reaches the frontier. The writes run in
a thread, and so does opening the backend (a Redis client asks its node whether it is a
Cluster): the reactor thread never waits for it. A failure (Redis down, at the start or
later) is logged once and never stops the crawl; the next interval tries again, opening
the backend anew if it was never opened. At close the worker removes its document.
:func:`merge` sums the documents of the workers still valid.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task, threads

from scrapy_scale.monitor import live_metrics, snapshot
from scrapy_scale.monitor import settings as S
from scrapy_scale.monitor.progress import DONE_VALUES, WINDOW, RateWindow
from scrapy_scale.monitor.snapshot import WorkerSnapshot
from scrapy_scale.shared_values import Refused, Warnings, decode_hash, loads

logger = logging.getLogger(__name__)
warnings = Warnings(logger)


class Sink:
    """Where one job's snapshots live (a Redis hash, or a folder of JSON files)."""

    def write(self, worker: str, doc: WorkerSnapshot) -> None:
        raise NotImplementedError

    def remove(self, worker: str) -> None:
        raise NotImplementedError

    def read(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class RedisSink(Sink):
    def __init__(self, url: str, job: str):
        from scrapy_scale.redis_open import open_redis

        self.r = open_redis(url, socket_timeout=5)
        self.key = f"scale:{{{job}}}:monitor"

    def write(self, worker: str, doc: WorkerSnapshot) -> None:
        self.r.hset(self.key, worker, snapshot.encode(doc))

    def remove(self, worker: str) -> None:
        self.r.hdel(self.key, worker)

    def read(self) -> list[Any]:
        good, bad = decode_hash(self.r.hgetall(self.key))
        warnings.refused(self.key, bad, "watch: workers' snapshots")
        return list(good.values())

    def close(self) -> None:
        self.r.close()


class FileSink(Sink):
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _path(self, worker: str) -> Path:
        return self.folder / (re.sub(r"[^A-Za-z0-9._-]+", "_", worker) + ".json")

    def write(self, worker: str, doc: WorkerSnapshot) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(worker)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(snapshot.encode(doc))
        os.replace(tmp, path)

    def remove(self, worker: str) -> None:
        try:
            self._path(worker).unlink()
        except FileNotFoundError:
            pass

    def read(self) -> list[dict[str, Any]]:
        docs = []
        for p in sorted(self.folder.glob("*.json")):
            try:
                docs.append(loads(p.read_bytes()))
            except OSError:
                continue  # removed or being replaced
            except Refused as e:  # being replaced, or not a snapshot a worker wrote
                warnings.warn(str(p), "refused", "watch: skipping worker snapshot %s: %s", p, e)
        return docs


def sink_for(settings: Any, job: str) -> Sink:
    """The sink next to the job's frontier (as a crawl with ``settings`` would use it)."""
    from scrapy_scale.frontier import settings as frontier_settings
    from scrapy_scale.frontier.ops import status as frontier_status

    url = frontier_settings.frontier_url(settings)
    scheme = urlsplit(url).scheme
    if scheme in ("redis", "rediss"):
        return RedisSink(url, job)
    path = frontier_status.state_path(settings)
    assert path is not None  # a frontier URL is sqlite:// or redis:// (checked with the settings)
    return FileSink(Path(path).parent / "monitor" / job)


#: seconds a snapshot may hold from now, at most (a worker writes 3 intervals ahead)
HOLDS_AT_MOST = snapshot.HOLDS_AT_MOST


def valid(docs: Iterable[Any], now: float) -> list[WorkerSnapshot]:
    """The snapshots that still hold at ``now``, decoded (:func:`snapshot.decode`, the one
    decoder): shared state is untrusted, so one that is not a record, whose ``until`` is
    not a finite time or holds more than HOLDS_AT_MOST ahead (``1e300``: a ghost worker for
    ever), or with a count that is not a number, is skipped with one warning per worker."""
    out = []
    for d in docs:
        name = str(d.get("worker", "?"))[:60] if isinstance(d, dict) else "?"
        try:
            doc = snapshot.decode(d, now)
        except Refused as e:
            warnings.warn(name, "bad", "watch: skipping the snapshot of worker %s: %s", name, str(e)[:80])
            continue
        if doc["until"] >= now:
            out.append(doc)
    return out


class Merged(TypedDict):
    """The sum of the workers' snapshots (:func:`merge`), as the watch view shows it."""

    workers: list[str]
    requests: Counter[str]
    retries: Counter[str]
    items_stored: int
    items_dead_lettered: int
    #: None when no worker knows its rates yet
    pages_per_min: float | None
    items_per_min: float | None
    finished_per_min: float | None
    domains: dict[str, Counter[str]]
    egress_pool: Counter[str]
    browser_contexts: int
    download_slots: int


def merge(docs: Iterable[WorkerSnapshot]) -> Merged:
    """The sum of the workers' snapshots (decoded by :func:`valid`): counts, rates,
    domains, pools."""
    out = Merged(
        workers=[],
        requests=Counter(),
        retries=Counter(),
        items_stored=0,
        items_dead_lettered=0,
        pages_per_min=None,
        items_per_min=None,
        finished_per_min=None,
        domains={},
        egress_pool=Counter(),
        browser_contexts=0,
        download_slots=0,
    )
    rates: dict[str, float] = {}
    for d in docs:
        out["workers"].append(d["worker"])
        out["requests"].update(d["requests"])
        out["retries"].update(d["retries"])
        out["items_stored"] += d["items_stored"]
        out["items_dead_lettered"] += d["items_dead_lettered"]
        for k in snapshot.RATES:
            v = d[k]  # type: ignore[literal-required]
            if v is not None:
                rates[k] = rates.get(k, 0.0) + v
        for name, v in d["domains"].items():
            out["domains"].setdefault(name, Counter()).update(v)
        out["egress_pool"].update(d["egress_pool"])
        out["browser_contexts"] += d["browser_contexts"]
        out["download_slots"] += d["download_slots"]
    if rates:  # a rate some worker knows: the others count as 0
        out["pages_per_min"] = rates.get("pages_per_min", 0.0)
        out["items_per_min"] = rates.get("items_per_min", 0.0)
        out["finished_per_min"] = rates.get("finished_per_min", 0.0)
    return out


class SnapshotPublisher:
    """Extension: this worker's snapshot to the frontier's backend every ``SCALE_WATCH_INTERVAL``."""

    def __init__(self, crawler: Any, interval: float):
        self.crawler = crawler
        self.interval = interval
        self.metrics = live_metrics.crawl_metrics(crawler)
        self.pages = RateWindow(max(WINDOW / 5, 5 * interval))  # recent: about a minute
        self.items = RateWindow(max(WINDOW / 5, 5 * interval))
        self.sink: Sink | None = None
        self._loop: task.LoopingCall | None = None
        self._writing: Any = None
        self._warned = False
        #: sinks opened (by :meth:`publish`, in the writer thread)
        self.opened = 0

    @classmethod
    def from_crawler(cls, crawler: Any) -> SnapshotPublisher:
        interval = S.WATCH_INTERVAL.get(crawler.settings)
        if not interval:
            raise NotConfigured("SCALE_WATCH_INTERVAL = 0")
        ext = cls(crawler, interval)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Any) -> None:
        live_metrics.set_labels(self.crawler, self.metrics, spider)
        # the sink is opened by the first write, in its thread (publish): opening a Redis
        # sink asks the node (INFO), which must not hold the reactor, nor, with Redis down
        # as the worker starts, stop the snapshots for the whole run
        self._loop = task.LoopingCall(self.tick)
        self._loop.start(self.interval, now=True).addErrback(
            lambda f: logger.error("watch snapshot failed: %s", f.getErrorMessage())
        )

    def document(self, now: float) -> WorkerSnapshot:
        live_metrics.refresh(self.crawler, self.metrics)
        s = self.metrics.snapshot()
        finals = sum(s["requests"].values())
        self.pages.add(now, finals)
        self.items.add(now, s["items_stored"])
        done = sum(v for k, v in s["requests"].items() if k in DONE_VALUES)
        pages, items = self.pages.rate(), self.items.rate()
        domains = {
            d: snapshot.DomainCounts(
                attempts=n,
                blocked=s["domain_blocked"].get(d, 0),
                rate_limited=s["domain_rate_limited"].get(d, 0),
            )
            for d, n in s["domain_attempts"].items()
        }
        return WorkerSnapshot(
            worker=self.metrics.base["worker"],
            job=self.metrics.base["job"],
            host=socket.gethostname(),
            pid=os.getpid(),
            at=time.time(),
            until=time.time() + 3 * self.interval,
            started=s["started"],
            requests=s["requests"],
            retries=s["retries"],
            done=done,
            items_stored=s["items_stored"],
            items_dead_lettered=s["items_dead_lettered"],
            pages_per_min=None if pages is None else pages * 60,
            items_per_min=None if items is None else items * 60,
            finished_per_min=None if pages is None else pages * 60,
            domains=domains,
            egress_pool=s["egress_pool"],
            browser_contexts=s["browser_contexts"],
            download_slots=s["download_slots"],
        )

    def tick(self) -> None:
        if self._writing is not None:
            return
        doc = self.document(time.monotonic())
        d = threads.deferToThread(self.publish, doc)
        self._writing = d
        d.addErrback(self._failed)
        d.addBoth(lambda _: setattr(self, "_writing", None))

    def publish(self, doc: WorkerSnapshot) -> None:
        """Write ``doc`` (in the writer thread), opening the sink first if it is not open."""
        if self.sink is None:
            self.sink = sink_for(self.crawler.settings, self.metrics.base["job"])
            self.opened += 1
        self.sink.write(doc["worker"], doc)

    def _failed(self, failure: Any) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("scrapy scale watch: publishing failed (will keep trying): %s", failure.getErrorMessage())

    async def spider_closed(self, spider: Any, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._writing is not None:  # a write in flight may be opening the sink
            await maybe_deferred_to_future(self._writing)
        if self.sink is None:
            return
        sink = self.sink
        worker = self.metrics.base["worker"]

        def goodbye() -> None:
            try:
                sink.remove(worker)
            finally:
                sink.close()

        try:
            await maybe_deferred_to_future(threads.deferToThread(goodbye))
        except Exception as e:  # noqa: BLE001
            logger.debug("watch snapshot removal failed: %s", e)
