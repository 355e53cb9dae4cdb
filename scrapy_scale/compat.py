"""Every use of Scrapy's private API, in one place (tests/unit/test_compat_signatures.py and tests/crawl/test_compat.py check each).

Scrapy gives a scheduler no public way to know whether the engine still holds a
request, nor to wake the engine after the scheduler got new work (the engine polls
an idle scheduler every 5 s). These helpers read ``ExecutionEngine._slot``; if a
Scrapy release changes it, the tests of this module fail first, and each helper
degrades to "unknown" rather than breaking a crawl.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def engine_of(crawler: Any) -> Any:
    """The crawler's engine, or None before it exists."""
    try:
        return crawler.engine
    except (AttributeError, RuntimeError):  # not crawling (tools, tests) / not set yet
        return None


def _slot(crawler: Any) -> Any:
    return getattr(engine_of(crawler), "_slot", None)


def engine_requests_in_progress(crawler: Any) -> set[Any] | None:
    """The requests the engine holds (downloading, or their output being processed);
    None when that cannot be known."""
    inprogress = getattr(_slot(crawler), "inprogress", None)
    return inprogress if isinstance(inprogress, set) else None


def engine_closing(crawler: Any) -> bool | None:
    """Has the engine begun closing the spider (it then waits for the requests it holds)?
    None when that cannot be known."""
    slot = _slot(crawler)
    if slot is None or not hasattr(slot, "closing"):
        return None
    return slot.closing is not None


def wake_engine(crawler: Any) -> bool:
    """Make the engine ask the scheduler for requests at once. False when it could not."""
    nextcall = getattr(_slot(crawler), "nextcall", None)
    schedule = getattr(nextcall, "schedule", None)
    if schedule is None:
        return False
    schedule()
    return True


def installed_reactor() -> Any:
    """The Twisted reactor Scrapy installed (typed Any: its interfaces are not one class)."""
    from twisted.internet import reactor

    return reactor


def slot_full_check(crawler: Any, on_the_way: Callable[[str], int] | None = None) -> Callable[[str], bool] | None:
    """A check "is the download slot of this host full" (as many requests in it, and
    ``on_the_way`` to it, as its concurrency), read from the downloader's public
    ``slots``; None when the engine has none, or when slots are keyed by IP
    (``CONCURRENT_REQUESTS_PER_IP``: a host's is not known by its name). A host without a
    slot yet gets the one the downloader will make (its ``DOWNLOAD_SLOTS`` concurrency,
    else the per-domain one)."""
    downloader = getattr(engine_of(crawler), "downloader", None)
    slots = getattr(downloader, "slots", None)
    if not isinstance(slots, dict) or crawler.settings.getint("CONCURRENT_REQUESTS_PER_IP"):
        return None
    per_slot = getattr(downloader, "per_slot_settings", None)
    per_slot = per_slot if isinstance(per_slot, dict) else {}
    default = getattr(downloader, "domain_concurrency", None)

    def full(host: str) -> bool:
        coming = on_the_way(host) if on_the_way is not None else 0
        slot = slots.get(host)
        try:
            if slot is None:  # its first requests wait in the middlewares (for robots.txt)
                conc = (per_slot.get(host) or {}).get("concurrency", default)
                return coming > 0 and isinstance(conc, int) and 0 < conc <= coming
            return len(slot.active) + coming >= slot.concurrency
        except (AttributeError, TypeError):  # a Slot of another shape: unknown, so not full
            return False

    return full


def downloader_active(crawler: Any) -> Callable[[], Any]:
    """The requests the downloader has now (``Downloader.active``: from ``fetch``, before
    the downloader middlewares, to its end), or None when it has no such set."""

    def active() -> Any:
        got = getattr(getattr(engine_of(crawler), "downloader", None), "active", None)
        return got if isinstance(got, set) else None

    return active


def drop_slot_delay(crawler: Any, key: str) -> bool:
    """Set the delay of the downloader's slot ``key`` to 0 (the pacing spaces its requests);
    False when there is no such slot or it has no ``delay``."""
    slots = getattr(getattr(engine_of(crawler), "downloader", None), "slots", None)
    slot = slots.get(key) if isinstance(slots, dict) else None
    if slot is None or not isinstance(getattr(slot, "delay", None), int | float):
        return False
    slot.delay = 0.0
    return True


def engine_scheduler(crawler: Any) -> Any:
    """The running engine's scheduler, or None before it is open."""
    engine = engine_of(crawler)
    if engine is None:
        return None
    sched = getattr(engine, "scheduler", None)  # a public property in Scrapy 2.19
    if sched is None:
        sched = getattr(_slot(crawler), "scheduler", None)
    return sched


# ---- the downloader's handlers (the egress first-byte timeout) ----------------------
# ``Downloader._download`` awaits ``self.handlers.download_request_async(request)`` for
# every download, after the download slot's delay; an instance attribute of that name on
# the downloader's ``handlers`` replaces the method. Scrapy has no public hook there.


def wrap_downloads(crawler: Any, wrap: Callable[[Any], Any]) -> Callable[[], bool] | None:
    """Make the downloader call ``wrap(inner)`` instead of its handlers'
    ``download_request_async`` (``inner``); the function that undoes it (False when
    something else wrapped it since: then it stays, and ``wrap``'s function should pass
    through), or None when the crawler has no such handlers (no engine yet)."""
    handlers = getattr(getattr(engine_of(crawler), "downloader", None), "handlers", None)
    inner = getattr(handlers, "download_request_async", None)
    if handlers is None or inner is None:
        return None
    before = vars(handlers).get("download_request_async")  # another wrapper, or none
    wrapped = wrap(inner)
    handlers.download_request_async = wrapped

    def undo() -> bool:
        if vars(handlers).get("download_request_async") is not wrapped:
            return False
        if before is None:
            del handlers.download_request_async
        else:
            handlers.download_request_async = before
        return True

    return undo


# ---- scrapy-playwright (the egress pool's browser contexts) ------------------------
# Its download handler keeps contexts in ``context_wrappers`` (name -> wrapper with
# ``.context``), creates them with ``_create_browser_context`` under
# ``context_launch_lock`` and has ``browser`` once launched. No public API for these.


def download_handler(crawler: Any, scheme: str) -> Any:
    """The download handler the crawler uses for ``scheme`` (loaded if need be), or None."""
    handlers = getattr(getattr(engine_of(crawler), "downloader", None), "handlers", None)
    get = getattr(handlers, "_get_handler", None)
    return get(scheme) if get is not None else None


def playwright_contexts(handler: Any) -> dict[str, Any]:
    """name -> browser context of a scrapy-playwright handler ({} for any other handler)."""
    wrappers = getattr(handler, "context_wrappers", None)
    if not isinstance(wrappers, dict):
        return {}
    return {name: getattr(w, "context", None) for name, w in wrappers.items()}


async def playwright_new_context(handler: Any, name: str, kwargs: dict[str, Any], spider: Any) -> None:
    """Create the named context now (as scrapy-playwright would at the first page), so a
    failure to start is known before the download."""
    async with handler.context_launch_lock:
        if name not in handler.context_wrappers:
            await handler._create_browser_context(name=name, context_kwargs=kwargs, spider=spider)


def playwright_browsers(handler: Any) -> int:
    """Browser processes the handler has launched and that are connected (0 or 1)."""
    browser = getattr(handler, "browser", None)
    try:
        return int(bool(browser is not None and browser.is_connected()))
    except Exception:
        return 0


# ---- names of classes (records, messages): the one place ``__module__`` is read -------------
# (never to find another component: components register what they offer in ScaleContext)


def module_of(obj: Any) -> str:
    """The dotted name of the module that defines ``obj`` (a class or function)."""
    return str(getattr(obj, "__module__", "") or "")


def qualified_name(cls: type) -> str:
    """``package.module.Class``, as a record stores a class and a message names it."""
    return f"{module_of(cls)}.{cls.__qualname__}"


def feed_exporter(crawler: Any) -> Any:
    """Scrapy's ``FeedExporter`` extension of this crawl (found in
    ``crawler.extensions.middlewares``), or None: no feed configured (it is then not
    enabled), or extensions not built yet."""
    from scrapy.extensions.feedexport import FeedExporter

    for ext in getattr(getattr(crawler, "extensions", None), "middlewares", None) or ():
        if isinstance(ext, FeedExporter):
            return ext
    return None


def export_to_feeds(exporter: Any, item: Any, spider: Any) -> None:
    """Write ``item`` to the open feeds of ``exporter`` (its ``item_scraped`` handler: each
    feed's item filter applies, batches roll over), without sending ``item_scraped``."""
    exporter.item_scraped(item, spider)


def route_feed_items(crawler: Any, exporter: Any, handler: Any) -> None:
    """Items of ``item_scraped`` go to ``handler`` instead of the ``FeedExporter``'s own
    handler (``handler`` passes them on with :func:`export_to_feeds`, or not)."""
    from scrapy import signals

    crawler.signals.disconnect(exporter.item_scraped, signal=signals.item_scraped)
    crawler.signals.connect(handler, signal=signals.item_scraped)


def journal_local_feeds(exporter: Any, storage: type) -> int:
    """Make ``storage`` (a subclass of Scrapy's ``FileFeedStorage``) build the local file
    feeds of ``exporter`` that Scrapy's own ``FileFeedStorage`` would (its ``storages``, read
    when each feed slot opens; a project's own storage class is left alone). How many
    schemes now use it."""
    from scrapy.extensions.feedexport import FileFeedStorage

    storages = getattr(exporter, "storages", None)
    if not isinstance(storages, dict):
        return 0
    schemes = [s for s, cls in storages.items() if cls is FileFeedStorage]
    for s in schemes:
        storages[s] = storage
    return len(schemes)


def feeds_accepting(exporter: Any, item: Any) -> int:
    """How many of the open feeds of ``exporter`` take ``item`` (each feed's ``item_classes``
    and ``item_filter``; read from its ``slots``, Scrapy has no public API for it)."""
    n = 0
    for slot in getattr(exporter, "slots", None) or ():
        accepts = getattr(getattr(slot, "filter", None), "accepts", None)
        n += bool(accepts is None or accepts(item))
    return n
