"""Building an :class:`Outcome` from a request and a verdict, and sending it on the bus.

The one place that knows how an outcome's fields are filled (fingerprint, domain,
download slot, egress id, attempt). Sending is one send of
:data:`scrapy_scale.signals.outcome` (through :class:`~scrapy_scale.outcomes.bus.OutcomeBus`,
which sends it as ``send_catch_log`` would, faster): every reactor (stats, frontier,
summary, outcome log, ...) is a receiver of that signal; none is called from here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.core.downloader import Downloader
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.python import global_object_name

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale.outcomes.bus import OutcomeBus
from scrapy_scale.outcomes.classify import Verdict
from scrapy_scale.outcomes.model import Blame, FailureClass, Outcome
from scrapy_scale.outcomes.retry_after import clamp_retry_after

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


def egress_id(request: Request) -> str | None:
    """``meta["scale_egress"]`` if set, else the proxy's host:port (never its credentials)."""
    e = request.meta.get(meta_keys.EGRESS)
    if e:
        return str(e)
    proxy = request.meta.get("proxy")
    if not proxy:
        return None
    p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    host = p.hostname or ""
    try:
        port = p.port or {"http": 80, "https": 443, "socks5": 1080}.get(p.scheme)
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def exception_name(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return global_object_name(type(exc))


class OutcomeEmitter:
    """Makes and sends outcomes for one crawler."""

    def __init__(self, crawler: Crawler, retry_after_max: float = math.inf):
        self.crawler = crawler
        self.bus = OutcomeBus(scale_signals.outcome, crawler.signals.sender)
        #: SCALE_RETRY_AFTER_MAX: the outcome's ``retry_after`` never exceeds it
        self.retry_after_max = retry_after_max

    def fingerprint(self, request: Request) -> str:
        fp = request.meta.get(meta_keys.FINGERPRINT)
        if fp:
            return str(fp)
        return self.crawler.request_fingerprinter.fingerprint(request).hex()  # type: ignore[union-attr]

    def build(self, request: Request, verdict: Verdict, **fields: Any) -> Outcome:
        """The outcome of ``request``'s attempt (fields: :func:`build_outcome`'s)."""
        return build_outcome(
            request, verdict, fingerprint=self.fingerprint(request), retry_after_max=self.retry_after_max, **fields
        )

    def send(self, outcome: Outcome, request: Request) -> None:
        self.bus.send(outcome=outcome, request=request, spider=self.crawler.spider)


def build_outcome(
    request: Request,
    verdict: Verdict,
    *,
    fingerprint: str | None = None,
    retry_after_max: float = math.inf,
    status: int | None = None,
    exception: BaseException | None = None,
    latency: float | None = None,
    final: bool = True,
    retry_at: float | None = None,
    avoid: tuple[str, ...] = (),
    items: int = 0,
    requests: int = 0,
    gave_up: str | None = None,
    internal: bool = False,
    fallback: bool = False,
    attempt: int | None = None,
) -> Outcome:
    """The outcome of ``request``'s attempt classified as ``verdict``. ``fingerprint``:
    the chain's (None: ``meta["scale_fingerprint"]``, else the URL); ``retry_after_max``:
    the outcome's ``retry_after`` never exceeds it."""
    m = request.meta
    slot = m.get(Downloader.DOWNLOAD_SLOT)
    return Outcome(
        fingerprint=fingerprint or str(m.get(meta_keys.FINGERPRINT) or request.url),
        url=request.url,
        domain=urlparse_cached(request).hostname or "",
        cls=verdict.cls,
        reason=verdict.reason,
        status=status,
        exception=exception_name(exception),
        egress=egress_id(request),
        latency=latency,
        attempt=meta_keys.attempt_of(m) if attempt is None else attempt,
        final=final,
        retry_at=retry_at,
        avoid_egress=avoid,
        items=items,
        requests=requests,
        slot=str(slot) if slot is not None else None,
        retry_after_raw=verdict.retry_after_raw,
        retry_after=clamp_retry_after(verdict.retry_after, retry_after_max),
        slow_down=verdict.slow_down,
        blame=verdict.blame if verdict.blame is not None else Blame.NONE,
        gave_up=gave_up is not None,
        gave_up_why=gave_up or "",
        internal=internal,
        fallback=fallback,
        callback=None if internal else callback_name(request),
    )


def callback_name(request: Request) -> str:
    """The name of the callback that handles ``request``'s response (``parse`` by default)."""
    cb = request.callback
    if cb is None:
        return "parse"
    return str(getattr(cb, "__name__", None) or cb)


#: the reason of the documented fallback outcome (docs/outcomes.md)
FALLBACK_REASON = "ended outside the outcome middlewares"


def fallback_outcome(crawler: Crawler, request: Request, responded: bool, items: int = 0) -> Outcome:
    """The one documented outcome of a request that ended without a final outcome (a
    component above the outcome middlewares dropped it, or they are not enabled):
    ``ok`` when a response reached the engine, else ``fatal``; ``fallback=True``.
    The caller sends it (:meth:`OutcomeEmitter.send`) so every subscriber sees it."""
    cls = FailureClass.OK if responded else FailureClass.FATAL
    reason = "" if responded else f"no response ({FALLBACK_REASON})"
    return OutcomeEmitter(crawler).build(request, Verdict(cls, reason), fallback=True, items=items)


def send_fallback(crawler: Crawler, request: Request, responded: bool, items: int = 0) -> Outcome:
    o = fallback_outcome(crawler, request, responded, items)
    OutcomeEmitter(crawler).send(o, request)
    return o
