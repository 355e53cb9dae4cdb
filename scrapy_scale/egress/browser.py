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
(``ScaleContext.extra["browser"]``, stats ``scale/egress/browser/...``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from scrapy.core.downloader.handlers.http11 import TunnelError

from scrapy_scale import compat
from scrapy_scale.egress.identity import Egress
from scrapy_scale.errors import ScaleError
from scrapy_scale.redact import redact_text

logger = logging.getLogger(__name__)

PREFIX = "egress:"
#: meta key: the context name this attempt uses (internal)
CONTEXT = "_scale_egress_context"


class EgressContextError(ScaleError, TunnelError):
    """A browser context for an egress could not start (an ``egress_failed`` outcome)."""


@dataclass
class _Ctx:
    name: str
    created: float
    pages: int = 0
    inflight: int = 0
    retired: bool = False


class BrowserContexts:
    def __init__(self, crawler: Any, pages: int, age: float, clock: Any):
        self.crawler = crawler
        self.max_pages, self.max_age, self.clock = pages, age, clock
        self.current: dict[str, _Ctx] = {}  # egress id -> its current context
        self.all: dict[str, _Ctx] = {}  # name -> context (current and retired, until closed)
        self.generation: Counter[str] = Counter()
        self.failed_starts = 0

    # ---- gauges ------------------------------------------------------------------

    def _handler(self) -> Any:
        return compat.download_handler(self.crawler, "https") or compat.download_handler(self.crawler, "http")

    @property
    def contexts(self) -> int:
        return sum(1 for n in compat.playwright_contexts(self._handler()) if n.startswith(PREFIX))

    @property
    def processes(self) -> int:
        return compat.playwright_browsers(self._handler())

    # ---- requests ----------------------------------------------------------------

    def _context_for(self, e: Egress) -> _Ctx:
        now = self.clock()
        c = self.current.get(e.id)
        if c is not None and (
            self.max_pages and c.pages >= self.max_pages or self.max_age and now - c.created >= self.max_age
        ):
            self._retire(c)
            c = None
        if c is None:
            self.generation[e.id] += 1
            c = _Ctx(f"{PREFIX}{e.id}:{self.generation[e.id]}", now)
            self.current[e.id] = self.all[c.name] = c
        return c

    async def assign(self, request: Any, e: Egress, spider: Any) -> None:
        m = request.meta
        self.release(m.pop(CONTEXT, None))
        c = self._context_for(e)
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
        m[CONTEXT] = c.name
        handler = self._handler()
        if handler is None or not hasattr(handler, "context_wrappers"):
            return
        try:
            await compat.playwright_new_context(handler, c.name, kwargs, spider)
        except Exception as exc:
            self.failed_starts += 1
            self.release(m.pop(CONTEXT, None))
            self.current.pop(e.id, None)
            self.all.pop(c.name, None)
            raise EgressContextError(
                f"browser context for egress {e.id} could not start: "
                f"{redact_text(type(exc).__name__ + ': ' + str(exc))[:300]}"
            ) from None

    def release(self, name: Any) -> None:
        c = self.all.get(name) if isinstance(name, str) else None
        if c is None:
            return
        c.inflight = max(0, c.inflight - 1)
        if c.retired and c.inflight == 0:
            self._close(c)

    def _retire(self, c: _Ctx) -> None:
        c.retired = True
        egress = c.name[len(PREFIX) :].rpartition(":")[0]
        if self.current.get(egress) is c:
            del self.current[egress]
        if c.inflight == 0:
            self._close(c)

    def evicted(self, egress: str) -> None:
        """The egress was quarantined globally: its contexts close (after their pages)."""
        for c in list(self.all.values()):
            if c.name.startswith(f"{PREFIX}{egress}:"):
                self._retire(c)

    def _close(self, c: _Ctx) -> None:
        self.all.pop(c.name, None)
        ctx = compat.playwright_contexts(self._handler()).get(c.name)
        if ctx is not None:
            asyncio.ensure_future(_quiet_close(ctx, c.name))

    async def close_all(self) -> None:
        """At spider close: every egress context, so none outlives the crawl."""
        self.current.clear()
        self.all.clear()
        live = [(n, c) for n, c in compat.playwright_contexts(self._handler()).items() if n.startswith(PREFIX)]
        await asyncio.gather(*(_quiet_close(c, n) for n, c in live if c is not None))

    @staticmethod
    def close_page(request: Any) -> None:
        """Close a page the callback kept, whatever the callback did (at the final outcome)."""
        page = request.meta.get("playwright_page")
        if page is not None and not page.is_closed():
            asyncio.ensure_future(_quiet_close(page, "page"))


async def _quiet_close(thing: Any, what: str) -> None:
    try:
        await thing.close()
    except Exception as e:  # already closed with its browser
        logger.debug("egress: closing %s: %s", what, e)
