"""Raw snapshots: the responses of failed parses (and optionally a sample of all responses),
kept compressed beside the job's data so a fixed spider can parse them again without
crawling (``scrapy scale replay``).

:class:`SnapshotDir` is the folder (plain Python, blocking): one gzip'd JSON file per request
fingerprint, named ``<time_ns>-<class>-<fingerprint>.json.gz``; bounded by count and bytes,
the oldest dropped first. :class:`Snapshots` is the Scrapy glue (an extension, a subscriber
of the ``outcome`` signal); it writes on one background thread.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import threading
import time
import weakref
import zlib
from collections import deque
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.core.downloader import Downloader
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import threads

from scrapy_scale import meta_keys, startup
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.errors import ItemDeadLettered
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.quality import judged, report_build
from scrapy_scale.quality import settings as quality_settings
from scrapy_scale.quality.pipeline import figures_of
from scrapy_scale.shared_values import loads

logger = logging.getLogger(__name__)

SUFFIX = ".json.gz"
#: the largest snapshot read back, in characters (the write bound, SCALE_QUALITY_SNAPSHOT_MAX_BYTES,
#: is of the compressed file)
READ_MAX_CHARS = 256 << 20
#: meta keys of one download, not of the request (a replay gets its own)
TRANSIENT_META = (Downloader.DOWNLOAD_SLOT, "download_latency", "download_timeout", "_scale_", "proxy")


class SnapshotDir:
    def __init__(self, folder: str, max_count: int = 1000, max_bytes: int = 100 * 2**20):
        self.folder = folder
        self.max_count, self.max_bytes = max_count, max_bytes
        self._lock = threading.Lock()

    @classmethod
    def for_job(cls, settings: Any, job: str) -> SnapshotDir:
        return cls(
            os.path.join(report_build.quality_dir(settings, job), "snapshots"),
            quality_settings.SNAPSHOT_MAX_COUNT.get(settings),
            quality_settings.SNAPSHOT_MAX_BYTES.get(settings),
        )

    def files(self) -> list[str]:
        """Snapshot file names, oldest first."""
        try:
            return sorted(n for n in os.listdir(self.folder) if n.endswith(SUFFIX) and not n.startswith("."))
        except FileNotFoundError:
            return []

    @staticmethod
    def parse_name(name: str) -> tuple[str, str]:
        """(class, fingerprint) of a file name."""
        stem = name[: -len(SUFFIX)]
        _, cls, fp = stem.split("-", 2)
        return cls, fp

    def write(self, snap: dict[str, Any]) -> int:
        """Keep ``snap`` (replacing an older snapshot of the same fingerprint); returns how many
        old snapshots were dropped to stay within the bounds."""
        data = gzip.compress(json.dumps(snap, default=str).encode(), compresslevel=6)
        if self.max_count == 0 or len(data) > self.max_bytes:
            return 1
        name = f"{time.time_ns():020d}-{snap['cls']}-{snap['fingerprint']}{SUFFIX}"
        with self._lock:
            os.makedirs(self.folder, exist_ok=True)
            for old in self.files():
                if old.endswith(f"-{snap['fingerprint']}{SUFFIX}"):
                    _unlink(os.path.join(self.folder, old))
            tmp = os.path.join(self.folder, "." + name)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(self.folder, name))
            return self._bound()

    def _bound(self) -> int:
        names = self.files()
        sizes = {n: _size(os.path.join(self.folder, n)) for n in names}
        total, dropped = sum(sizes.values()), 0
        while names and (len(names) > self.max_count or total > self.max_bytes):
            oldest = names.pop(0)
            _unlink(os.path.join(self.folder, oldest))
            total -= sizes[oldest]
            dropped += 1
        return dropped

    def read(self, name: str) -> dict[str, Any]:
        """A snapshot file read back (state on disk: untrusted): JSON of bounded nesting
        (shared_values.loads; ValueError when not), a JSON object (ValueError when not);
        a file that is not gzip raises OSError, a truncated one EOFError or zlib.error."""
        with open(os.path.join(self.folder, name), "rb") as f:
            doc = loads(gzip.decompress(f.read()), max_chars=READ_MAX_CHARS)
        if not isinstance(doc, dict):
            raise ValueError(f"not a snapshot: a JSON {type(doc).__name__}")
        return doc

    def entries(self, cls: str | None = None) -> list[str]:
        return [n for n in self.files() if cls is None or self.parse_name(n)[0] == cls]

    def index(self) -> dict[str, str]:
        """URL -> snapshot path, for the report's sample (reads each file's header)."""
        out = {}
        for n in self.files():
            try:
                out[str(self.read(n)["url"])] = os.path.join(self.folder, n)
            except (OSError, EOFError, zlib.error, ValueError, KeyError):
                continue  # unreadable: the replay names it (replay_plan), the report skips it
        return out


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def snapshot_of(
    response: Response,
    request: Request,
    spider: Spider | None,
    fingerprint: str,
    cls: str,
    reason: str,
    job: str,
    run_id: str,
    judged_with: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON-able snapshot of one response and the request that got it, with the settings
    that judged it (``judged_with``, :func:`scrapy_scale.quality.judged.record`)."""
    try:
        rd = request.to_dict(spider=spider)
    except ValueError:  # a callback that is not a spider method: replayed with the default one
        rd = request.replace(callback=None, errback=None).to_dict()
    m = {}
    for k, v in (rd.get("meta") or {}).items():
        if any(k.startswith(p) for p in TRANSIENT_META):
            continue
        try:
            json.dumps(v)
            m[k] = v
        except (TypeError, ValueError):
            continue
    rd["meta"] = m
    rd["body"] = base64.b64encode(rd.get("body") or b"").decode()
    rd.pop("cb_kwargs", None) if not _jsonable(rd.get("cb_kwargs")) else None
    rd = {k: v for k, v in rd.items() if _jsonable(v)}
    headers = {k.decode("latin-1"): [v.decode("latin-1") for v in vs] for k, vs in response.headers.items()}
    return {
        "url": response.url,
        "status": response.status,
        "headers": headers,
        "body": base64.b64encode(response.body).decode(),
        "request": rd,
        "fingerprint": fingerprint,
        "cls": cls,
        "reason": reason,
        "spider": getattr(spider, "name", None),
        "job": job,
        "run_id": run_id,
        "at": time.time(),
        judged.FIELD: judged_with,
    }


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


class Snapshots:
    """Keeps the responses of failed parses (``SCALE_QUALITY_SNAPSHOT_CLASSES``) and a seeded
    sample of the others (``SCALE_QUALITY_SNAPSHOT_SAMPLE``). Registered in the crawler's
    context as ``snapshot_index`` (the report links the sample to them)."""

    def __init__(self, crawler: Crawler):
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.classes = set(quality_settings.SNAPSHOT_CLASSES.get(s))
        self.sample: float = quality_settings.SNAPSHOT_SAMPLE.get(s)
        self.ctx = ScaleContext.of(crawler)
        self.ctx.snapshot_index = self
        self.figures = figures_of(crawler)
        self.dir: SnapshotDir | None = None
        self.judged_with: dict[str, Any] | None = None
        self._responses: weakref.WeakKeyDictionary[Request, Response] = weakref.WeakKeyDictionary()
        self._done: set[str] = set()
        self._queue: deque[dict[str, Any]] = deque()
        self._writing: Any = None
        sig = crawler.signals
        sig.connect(self.on_opened, signal=signals.spider_opened)
        sig.connect(self.on_response, signal=signals.response_received)
        sig.connect(self.on_outcome, signal=scale_signals.outcome)
        sig.connect(self.on_dropped, signal=signals.item_dropped)
        sig.connect(self.on_closed, signal=signals.spider_closed)

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> Snapshots:
        s = crawler.settings
        if not quality_settings.SNAPSHOT_CLASSES.get(s) and not quality_settings.SNAPSHOT_SAMPLE.get(s):
            raise NotConfigured("no snapshot class and no sample")
        if not quality_settings.SNAPSHOT_MAX_COUNT.get(s):
            raise NotConfigured("SCALE_QUALITY_SNAPSHOT_MAX_COUNT is 0")
        return cls(crawler)

    def on_opened(self, spider: Spider) -> None:
        self.job = self.ctx.job or core_settings.JOB.get(self.crawler.settings) or spider.name
        self.dir = SnapshotDir.for_job(self.crawler.settings, self.job)
        # the settings that judge this crawl's pages: a replay judges them the same way
        self.judged_with = judged.record(self.crawler.settings)

    def index(self) -> dict[str, str]:
        return self.dir.index() if self.dir is not None else {}

    def on_response(self, response: Response, request: Request, **kw: Any) -> None:
        self._responses[request] = response

    def _sampled(self, url: str) -> bool:
        if not self.sample:
            return False
        h = int(hashlib.sha1(url.encode("utf-8", "backslashreplace")).hexdigest()[:8], 16)
        return h / 0xFFFFFFFF < self.sample

    def on_outcome(self, outcome: Outcome, request: Request | None = None, **kw: Any) -> None:
        if not outcome.final or outcome.internal or request is None:
            return
        response = self._responses.pop(request, None)
        if response is None:
            return
        cls = str(outcome.cls)
        if cls in self.classes or (outcome.done and self._sampled(outcome.url)):
            self._keep(response, request, outcome.fingerprint, cls if cls in self.classes else "sample", outcome.reason)

    def on_dropped(self, item: Any = None, response: Response | None = None, exception: Any = None, **kw: Any) -> None:
        """An item of an ``ok`` page went to quarantine or the dead letter: its request is
        failed as ``parse_failed``; keep its response as such."""
        if "parse_failed" not in self.classes or response is None or not isinstance(exception, ItemDeadLettered):
            return
        request = response.request
        if request is None:
            return
        fp = request.meta.get(meta_keys.FINGERPRINT) or self.crawler.request_fingerprinter.fingerprint(request).hex()
        self._keep(response, request, str(fp), "parse_failed", f"{exception.label}: {exception.reason}")

    def _keep(self, response: Response, request: Request, fp: str, cls: str, reason: str) -> None:
        if fp in self._done or self.dir is None:
            return
        self._done.add(fp)
        rid = str(self.ctx.run_id or "")
        try:
            snap = snapshot_of(response, request, self.crawler.spider, fp, cls, reason, self.job, rid, self.judged_with)
        except Exception as e:  # noqa: BLE001 - a snapshot must never break the crawl
            logger.warning("no snapshot of %s: %s", response.url, e)
            return
        self._queue.append(snap)
        if self._writing is None:
            self._writing = threads.deferToThread(self._drain)
            self._writing.addBoth(self._drained)

    def _drain(self) -> tuple[int, int]:
        """On a thread: write what is queued; (written, dropped)."""
        written = dropped = 0
        assert self.dir is not None
        while self._queue:
            snap = self._queue.popleft()
            try:
                dropped += self.dir.write(snap)
                written += 1
            except OSError as e:
                logger.warning("snapshot of %s not written: %s", snap.get("url"), e)
        return written, dropped

    def _drained(self, result: Any) -> None:
        self._writing = None
        if isinstance(result, tuple):
            written, dropped = result
            self.figures.snapshots += written
            self.figures.snapshots_dropped += dropped
            self.stats.inc_value(K.QUALITY_SNAPSHOTS, written)
            if dropped:
                self.stats.inc_value(K.QUALITY_SNAPSHOTS_DROPPED, dropped)
        if self._queue:
            self._writing = threads.deferToThread(self._drain)
            self._writing.addBoth(self._drained)

    async def on_closed(self, spider: Spider) -> None:
        while self._writing is not None:
            await maybe_deferred_to_future(self._writing)
