"""Requests on their way to a download slot: handed out, not yet in the slot.

The scheduler skips the requests of a host whose download slot is full (:mod:`.pacing`):
handed out, they would queue in the slot, and the downloader starts a queued request the
moment a transfer ends, before that transfer's connection is back in the pool, so the
pool opens a new connection and closes one. But between the hand-out and the slot come
the downloader middlewares, and some await (robots.txt's check does while the host's
robots.txt is on its way): the engine asked again meanwhile and the slot still looked
free, so a site's requests were handed out past its concurrency, queued, and the bench
crawl opened five times the connections plain Scrapy does.

So a request handed out counts against its host's slot until it reaches the downloader
(``request_reached_downloader``), and only while the downloader still has it
(``Downloader.active``, which the engine fills before the middlewares run): one a
middleware answered (an HTTP cache hit), dropped (a robots.txt disallow, offsite) or
replaced (the egress pool's wait, the not-before guard) stops counting at once, and the
engine asks again when that download ends. Without that view of the downloader, a
request stops counting after :data:`TTL` seconds. A request whose download slot is keyed
otherwise (``download_slot`` meta) is not counted: its host's slot is not the one it
waits for. Keyed by the request object (weakly), nothing is written into its meta.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Callable, Container
from typing import Any

from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

#: seconds a request handed out counts at most when the downloader's requests are not known
TTL = 1.0


class SlotTransit:
    def __init__(
        self,
        in_downloader: Callable[[], Container[Request] | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        #: the requests the downloader has (between ``fetch`` and its end); None: unknown
        self.in_downloader = in_downloader
        self.clock = clock
        #: per host: request number -> (the request, weakly; when handed out)
        self._by_host: dict[str, dict[int, tuple[weakref.ref[Request], float]]] = {}
        self._of: weakref.WeakKeyDictionary[Request, tuple[str, int]] = weakref.WeakKeyDictionary()
        self._numbers = itertools.count(1)

    def sent(self, request: Request) -> None:
        """``request`` was handed out to the engine."""
        self.arrived(request)  # handed out again (the same object): counted once
        host = urlparse_cached(request).hostname or ""
        slot = request.meta.get("download_slot")
        if slot is not None and slot != host:
            return  # its slot is not its host's
        n = next(self._numbers)

        def collected(_: weakref.ref[Request]) -> None:  # garbage: nothing else would prune it
            self._forget(host, n)

        ref = weakref.ref(request, collected)
        self._by_host.setdefault(host, {})[n] = (ref, self.clock())
        self._of[request] = (host, n)

    def arrived(self, request: Request, **_: Any) -> None:
        """``request`` reached the downloader (its slot counts it now)."""
        got = self._of.pop(request, None)
        if got is not None:
            self._forget(*got)

    def clear(self) -> None:
        """Forget every request on its way (the worker stops)."""
        self._by_host.clear()
        self._of.clear()

    def _forget(self, host: str, n: int) -> None:
        held = self._by_host.get(host)
        if held is not None:
            held.pop(n, None)
            if not held:
                del self._by_host[host]

    def pending(self, host: str) -> int:
        """Requests to ``host`` handed out, still in the downloader's middlewares."""
        held = self._by_host.get(host)
        if not held:
            return 0
        active = self.in_downloader() if self.in_downloader is not None else None
        now = self.clock()
        for n, (ref, at) in list(held.items()):
            r = ref()
            if active is not None:
                gone = r is None or r not in active  # answered, dropped or replaced in a middleware
            else:
                gone = r is None or not now - TTL <= at <= now + TTL
            if gone:
                if r is not None:
                    self._of.pop(r, None)
                self._forget(host, n)
        return len(self._by_host.get(host, ()))
