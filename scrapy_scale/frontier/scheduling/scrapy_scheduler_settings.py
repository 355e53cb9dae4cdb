"""Scheduler settings of Scrapy and scrapy-redis, as the frontier reads them.

A project moving to ``scrapy_scale.frontier.Scheduler`` may still set them. Those with a
meaning here are honoured (:func:`read`), the others get one startup warning each
naming the setting and what to use instead, so that none is silently ignored:

- ``SCHEDULER_FLUSH_ON_START = True`` (scrapy-redis): the job starts over at each start;
- ``SCHEDULER_PERSIST = False`` (scrapy-redis): each crawl is a new run (nothing is
  resumed; the records stay until the next crawl starts, for ``scrapy scale status``);
- ``DUPEFILTER_CLASS = "scrapy.dupefilters.BaseDupeFilter"``: no deduplication: a
  request for a URL already done or failed is fetched again (as ``dont_filter=True``);
- ``SCHEDULER_MEMORY_QUEUE`` / ``SCHEDULER_DISK_QUEUE`` naming one of Scrapy's FIFO queues
  (``FifoMemoryQueue``, ``PickleFifoDiskQueue``, ``MarshalFifoDiskQueue``; Scrapy's recipe
  for breadth-first order): requests wait in arrival order within a site instead of newest
  first (Scrapy's default LIFO queues, what the frontier does otherwise);
- ``SCHEDULER_START_MEMORY_QUEUE`` / ``SCHEDULER_START_DISK_QUEUE`` set to ``None``: start
  requests are ordered like the others instead of waiting behind them in their order;
- ``DUPEFILTER_CLASS`` naming another filter, ``SCHEDULER_PRIORITY_QUEUE``, any other
  value of the queue settings above: a warning.

Only settings the project set count (a priority above Scrapy's defaults): the defaults
mean nothing here. Plain Python over a settings object; no reactor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_scale import compat

if TYPE_CHECKING:
    from scrapy_scale.frontier.store import FrontierStore

logger = logging.getLogger("scrapy_scale.frontier.scheduling.scheduler")

BASE_DUPEFILTER = "scrapy.dupefilters.BaseDupeFilter"
RFP_DUPEFILTER = "scrapy.dupefilters.RFPDupeFilter"

#: settings that mean nothing to the frontier: what to use instead
NOT_USED = {
    "SCHEDULER_PRIORITY_QUEUE": "the frontier orders requests itself: highest Request.priority first, "
    "round-robin across domains with eligible work (what DownloaderAwarePriorityQueue is set for)",
}

#: the queue settings whose FIFO or LIFO choice the frontier follows (requests: within a
#: site, newest first unless FIFO), and what any other value means here
ORDER_SETTINGS = {
    "SCHEDULER_DISK_QUEUE": "requests are persisted in the frontier store (SCALE_FRONTIER_URL), as JSON, "
    "never pickle; only the choice of FIFO or LIFO is followed",
    "SCHEDULER_MEMORY_QUEUE": "the frontier holds at most SCALE_FRONTIER_BATCH leased requests in memory "
    "(set SCALE_FRONTIER_BATCH); only the choice of FIFO or LIFO is followed",
}
START_SETTINGS = {
    "SCHEDULER_START_DISK_QUEUE": "start requests are persisted in the frontier store (SCALE_FRONTIER_URL) like every request; "
    "they wait behind the crawl's own requests in their order, or set it to None to order them like the others",
    "SCHEDULER_START_MEMORY_QUEUE": "start requests wait behind the crawl's own requests in their order "
    "(as with Scrapy's default), or set it to None to order them like the others",
}
FIFO_QUEUES = {"FifoMemoryQueue", "PickleFifoDiskQueue", "MarshalFifoDiskQueue", "FifoDiskQueue"}
LIFO_QUEUES = {"LifoMemoryQueue", "PickleLifoDiskQueue", "MarshalLifoDiskQueue", "LifoDiskQueue"}


@dataclass(frozen=True)
class SchedulerSettings:
    #: the setting that makes the job start over at open (``"SCHEDULER_PERSIST = False"``), or None
    start_over: str | None = None
    #: deduplicate by request fingerprint (False: ``DUPEFILTER_CLASS = BaseDupeFilter``)
    dedup: bool = True
    #: one line per setting set but not used here
    warnings: tuple[str, ...] = ()
    #: requests wait in arrival order within a site (the project chose FIFO queues)
    fifo: bool = False
    #: start requests wait behind the crawl's own requests, in their order
    start_fifo: bool = True

    def record_options(self) -> dict[str, bool]:
        """What :func:`scrapy_scale.frontier.records.identity.new_record` needs of these settings."""
        return {"dedup": self.dedup, "fifo": self.fifo, "start_fifo": self.start_fifo}


DEFAULT = SchedulerSettings()


def project_set(settings: Any, name: str) -> bool:
    """Did the project (or the command line, a spider, an add-on) set ``name``?"""
    return name in settings and (settings.getpriority(name) or 0) > 0


def read(settings: Any) -> SchedulerSettings:
    start_over = None
    if project_set(settings, "SCHEDULER_FLUSH_ON_START") and settings.getbool("SCHEDULER_FLUSH_ON_START"):
        start_over = "SCHEDULER_FLUSH_ON_START = True"
    elif project_set(settings, "SCHEDULER_PERSIST") and not settings.getbool("SCHEDULER_PERSIST", True):
        start_over = "SCHEDULER_PERSIST = False"
    warnings = []
    dedup = True
    if project_set(settings, "DUPEFILTER_CLASS"):
        kind = dupefilter_kind(settings.get("DUPEFILTER_CLASS"))
        if kind == "off":
            dedup = False
        elif kind == "other":
            warnings.append(
                f"DUPEFILTER_CLASS = {_name(settings.get('DUPEFILTER_CLASS'))!r} is not used: the frontier "
                f"deduplicates by request fingerprint (REQUEST_FINGERPRINTER_CLASS) in its store; set "
                f"DUPEFILTER_CLASS = {BASE_DUPEFILTER!r} to turn deduplication off, or dont_filter=True "
                f"on a request"
            )
    for name, instead in NOT_USED.items():
        if project_set(settings, name):
            warnings.append(f"{name} = {_name(settings.get(name))!r} is not used: {instead}")
    fifo = False
    for name, instead in ORDER_SETTINGS.items():
        if project_set(settings, name):
            kind = queue_kind(settings.get(name))
            fifo = fifo or kind == "fifo"
            if kind == "other":
                warnings.append(f"{name} = {_name(settings.get(name))!r} is not used: {instead}")
    start_fifo = True
    for name, instead in START_SETTINGS.items():
        if project_set(settings, name):
            if settings.get(name) is None:
                start_fifo = False
            elif queue_kind(settings.get(name)) != "fifo":
                warnings.append(f"{name} = {_name(settings.get(name))!r} is not used: {instead}")
    return SchedulerSettings(start_over, dedup, tuple(warnings), fifo, start_fifo)


def queue_kind(value: Any) -> str:
    """``"fifo"`` or ``"lifo"`` for one of Scrapy's queue classes (by its name or the class),
    ``"other"`` for anything else."""
    name = _name(value).rsplit(".", 1)[-1]
    if name in FIFO_QUEUES:
        return "fifo"
    if name in LIFO_QUEUES:
        return "lifo"
    return "other"


def dupefilter_kind(value: Any) -> str:
    """``"off"`` (BaseDupeFilter: sees nothing), ``"same"`` (Scrapy's RFPDupeFilter, what the
    frontier does anyway) or ``"other"``."""
    from scrapy.dupefilters import BaseDupeFilter, RFPDupeFilter
    from scrapy.utils.misc import load_object

    try:
        cls = load_object(value) if isinstance(value, str) else value
    except (ImportError, ValueError, AttributeError, NameError):
        return "other"  # e.g. scrapy_redis.dupefilter.RFPDupeFilter without scrapy-redis
    if cls is BaseDupeFilter:
        return "off"
    if cls is RFPDupeFilter:
        return "same"
    return "other"


def _name(value: Any) -> str:
    if isinstance(value, type):
        return compat.qualified_name(value)
    return str(value)


def start_over(store: FrontierStore, why: str, worker: str, claim: Callable[[], str] | None) -> str:
    """Start the job over (``why``: the setting asking for it) unless other live workers
    crawl it; returns this worker's id (claimed again after the reset when ``claim``).

    Other workers crawl it when another worker id holds an unexpired lease, or (ids
    ``host/N`` from ``claim``) when a live process on this host holds a lower slot: a
    worker joining a running job must not throw its work away."""
    others = sorted(w for w, n in store.status().leases_by_worker.items() if n and w != worker)
    if claim is not None and not worker.endswith("/0"):
        others.append("another live process on this host")
    if others:
        logger.info("%s: job %r is being crawled (%s): this worker joins its run", why, store.job, ", ".join(others))
        return worker
    records = sum(store.counts().values())
    store.reset()
    logger.info("%s: job %r starts over (%d record(s) of its last run dropped)", why, store.job, records)
    return claim() if claim is not None else worker
