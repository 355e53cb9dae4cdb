"""Browser contexts bound to egresses (scrapy-playwright): one context per egress,
launched with that egress's proxy; the pool creates, limits and closes them.

For a request with ``meta["playwright"]``, :class:`BrowserContexts` names the context
(``egress:<id>:<generation>``), gives it the proxy (server, username, password) in
``meta["playwright_context_kwargs"]`` (the request's own context kwargs kept) and
creates it before the download, so a context that cannot start raises
:class:`EgressContextError` (a ``TunnelError``: the outcome is ``egress_failed``, and the
retry goes through another egress). A context is retired after
``SCALE_EGRESS_CONTEXT_PAGES`` pages or ``SCALE_EGRESS_CONTEXT_AGE`` seconds (the next
request gets a new generation) and closed once its last page is done; the contexts of
an evicted egress are closed too, and every egress context at spider close.
Pages a callback kept (``playwright_include_page``) are closed at the request's final
outcome, even when the callback raised. Live contexts and browser processes are gauges
(``ScaleContext.browser``, stats ``scale/egress/browser/...``), read from the
handlers themselves; ``settled()`` fires once the contexts are closed at spider close.
Each close at spider close gets ``CLOSE_TIMEOUT`` seconds: a context whose close hangs
is left to the browser's own shutdown, with one WARNING, so it cannot hang
``spider_closed``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.utils.httpobj import urlparse_cached

from scrapy_scale import compat
from scrapy_scale.egress.identity import Egress
from scrapy_scale.errors import ScaleError
from scrapy_scale.redact import redact_text

logger = logging.getLogger(__name__)

PREFIX = "egress:"
#: meta key: this attempt's assignment to a context (an int token, internal). A token, not the
#: context's name: a retry is a copy of the failed attempt's request, so its meta carries the
#: key too, and both the attempt's outcome and the retry's scheduling release it; the token
#: makes the second release a no-op (counted twice, a context in use looked idle, was closed
#: under a page being opened in it, and Playwright's new_page never returned: a stalled crawl)
CONTEXT = "_scale_egress_context"
#: scrapy-playwright's meta key of a page kept for the callback (``playwright_include_page``)
PAGE = "playwright_page"
#: seconds each egress context gets to close at spider close
CLOSE_TIMEOUT = 10.0


class EgressContextError(ScaleError, TunnelError):
    """A browser context for an egress could not start (an ``egress_failed`` outcome)."""


@dataclass
class _Ctx:
    name: str
    created: float
    #: the download handler the context lives in (the one serving its requests' scheme)
    handler: Any = None
    pages: int = 0
    inflight: int = 0
    retired: bool = False


class BrowserContexts:
    """The egress contexts of every download handler that serves browser requests. Scrapy
    builds one handler object per scheme (``http`` and ``https`` mapped to
    scrapy-playwright are two handlers, two browsers): a request's context is created,
    counted, replaced and closed in the handler that serves the request's scheme."""

    def __init__(self, crawler: Any, pages: int, age: float, clock: Any):
        self.crawler = crawler
        self.max_pages, self.max_age, self.clock = pages, age, clock
        self.current: dict[tuple[int, str], _Ctx] = {}  # (handler, egress id) -> its current context
        self.all: dict[str, _Ctx] = {}  # name -> context (current and retired, until closed)
        self.generation: Counter[str] = Counter()  # per egress, over all handlers: names are unique
        self.handlers: dict[int, Any] = {}  # the handlers that served browser requests, by id()
        self.failed_starts = 0
        #: live assignments: token (meta[CONTEXT]) -> context name; released once
        self.assigned: dict[int, str] = {}
        self._tokens = itertools.count(1)
        self._closed: Any = None  # fired once close_all() is done (see settled())
        self.close_timeout = CLOSE_TIMEOUT

    # ---- gauges: what the handlers really hold ---------------------------------------

    def _handler(self, scheme: str) -> Any:
        h = compat.download_handler(self.crawler, scheme)
        if h is not None and hasattr(h, "context_wrappers"):
            self.handlers.setdefault(id(h), h)
        return h

    @property
    def contexts(self) -> int:
        """Egress contexts open in the handlers (not this object's own bookkeeping)."""
        return sum(
            1 for h in list(self.handlers.values()) for n in compat.playwright_contexts(h) if n.startswith(PREFIX)
        )

    @property
    def processes(self) -> int:
        return sum(compat.playwright_browsers(h) for h in list(self.handlers.values()))

    # ---- requests ----------------------------------------------------------------

    def _context_for(self, e: Egress, handler: Any) -> _Ctx:
        now = self.clock()
        key = (id(handler), e.id)
        c = self.current.get(key)
        if c is not None and (
            self.max_pages and c.pages >= self.max_pages or self.max_age and now - c.created >= self.max_age
        ):
            self._retire(c)
            c = None
        if c is None:
            self.generation[e.id] += 1
            c = _Ctx(f"{PREFIX}{e.id}:{self.generation[e.id]}", now, handler)
            self.current[key] = self.all[c.name] = c
        return c

    async def assign(self, request: Any, e: Egress, spider: Any) -> None:
        m = request.meta
        self.release(m.pop(CONTEXT, None))
        handler = self._handler(urlparse_cached(request).scheme)
        c = self._context_for(e, handler)
        kwargs = {k: v for k, v in (m.get("playwright_context_kwargs") or {}).items() if k != "proxy"}
        if e.proxy_url:
            proxy: dict[str, str] = {"server": e.proxy_url}
            creds = e.credentials
            if creds:
                proxy.update(username=creds[0], password=creds[1])
            kwargs["proxy"] = proxy
        m["playwright_context"] = c.name
        m["playwright_context_kwargs"] = kwargs
        c.pages += 1
        c.inflight += 1
        token = next(self._tokens)
        self.assigned[token] = c.name
        m[CONTEXT] = token
        if handler is None or not hasattr(handler, "context_wrappers"):
            return
        try:
            await compat.playwright_new_context(handler, c.name, kwargs, spider)
        except Exception as exc:
            self.failed_starts += 1
            self.release(m.pop(CONTEXT, None))
            self.current.pop((id(handler), e.id), None)
            self.all.pop(c.name, None)
            raise EgressContextError(
                f"browser context for egress {e.id} could not start: "
                f"{redact_text(type(exc).__name__ + ': ' + str(exc))[:300]}"
            ) from None

    def release(self, token: Any) -> None:
        """The attempt of assignment ``token`` is over (its outcome, or its request went back
        to the scheduler); a token already released, or not one, is ignored."""
        name = self.assigned.pop(token, None) if isinstance(token, int) and not isinstance(token, bool) else None
        c = self.all.get(name) if name is not None else None
        if c is None:
            return
        c.inflight = max(0, c.inflight - 1)
        if c.retired and c.inflight == 0:
            self._close(c)

    def _retire(self, c: _Ctx) -> None:
        c.retired = True
        key = (id(c.handler), c.name[len(PREFIX) :].rpartition(":")[0])
        if self.current.get(key) is c:
            del self.current[key]
        if c.inflight == 0:
            self._close(c)

    def evicted(self, egress: str) -> None:
        """The egress was quarantined globally: its contexts close (after their pages)."""
        for c in list(self.all.values()):
            if c.name.startswith(f"{PREFIX}{egress}:"):
                self._retire(c)

    def _close(self, c: _Ctx) -> None:
        self.all.pop(c.name, None)
        ctx = compat.playwright_contexts(c.handler).get(c.name)
        if ctx is not None:
            asyncio.ensure_future(_quiet_close(ctx, c.name))

    async def close_all(self) -> None:
        """At spider close: every egress context of every handler, so none outlives the crawl."""
        self.current.clear()
        self.all.clear()
        self.assigned.clear()
        try:
            live = [
                (n, c)
                for h in list(self.handlers.values())
                for n, c in compat.playwright_contexts(h).items()
                if n.startswith(PREFIX)
            ]
            live = [(n, c) for n, c in live if c is not None]
            done = await asyncio.gather(*(_bounded_close(c, n, self.close_timeout) for n, c in live))
            hung = [n for (n, _), ok in zip(live, done, strict=True) if not ok]
            if hung:
                logger.warning(
                    "egress: %d browser context(s) did not close within %g s at spider close (%s); "
                    "left to the browser's shutdown",
                    len(hung),
                    self.close_timeout,
                    ", ".join(hung[:5]),
                )
        finally:
            self.settled()
            if not self._closed.called:
                self._closed.callback(None)

    def settled(self) -> Any:
        """A Deferred that fires once the contexts are closed at spider close: the metrics
        wait for it before their last read, so the final gauge says what stayed open."""
        from twisted.internet import defer

        if self._closed is None:
            self._closed = defer.Deferred()
        return _follow(self._closed)

    @staticmethod
    def close_page(request: Any) -> None:
        """Close a page the callback kept, whatever the callback did (at the attempt's outcome)."""
        page = request.meta.get(PAGE)
        if page is not None and not page.is_closed():
            asyncio.ensure_future(_quiet_close(page, "page"))


def _follow(d: Any) -> Any:
    """A new Deferred that fires when ``d`` has (``d`` itself stays untouched)."""
    from twisted.internet import defer

    out: defer.Deferred[None] = defer.Deferred()
    if d.called:
        out.callback(None)
    else:

        def fire(result: Any) -> Any:
            out.callback(None)
            return result

        d.addBoth(fire)
    return out


async def _quiet_close(thing: Any, what: str) -> None:
    try:
        await thing.close()
    except Exception as e:  # already closed with its browser
        logger.debug("egress: closing %s: %s", what, e)


async def _bounded_close(thing: Any, what: str, timeout: float) -> bool:
    """Close ``thing`` within ``timeout`` seconds; False when it did not."""
    try:
        await asyncio.wait_for(_quiet_close(thing, what), timeout)
    except TimeoutError:
        return False
    return True
