"""Requests on their way to a download slot: handed out, not yet in the slot.

The scheduler skips the requests of a host whose download slot is full (:mod:`.pacing`):
handed out, they would queue in the slot, and the downloader starts a queued request the
moment a transfer ends, before that transfer's connection is back in the pool, so the
pool opens a new connection and closes one. But between the hand-out and the slot come
the downloader middlewares, and some await (robots.txt's check does, each request): the
engine asked again meanwhile and the slot still looked free, so a site's requests were
handed out past its concurrency, queued, and the bench crawl opened five times the
connections plain Scrapy does. So each request handed out counts against its host's slot
until the downloader takes it (``request_reached_downloader``), :data:`TTL` seconds at
most: a request a middleware drops (a robots.txt disallow, an offsite one) never gets
there. Keyed by the request object (weakly), nothing is written into its meta.
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Callable
from typing import Any

from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

#: seconds a request handed out counts against its host's slot at most
TTL = 1.0


class SlotTransit:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        #: per host (the download slot's default key): request number -> when handed out
        self._by_host: dict[str, dict[int, float]] = {}
        self._of: weakref.WeakKeyDictionary[Request, tuple[str, int]] = weakref.WeakKeyDictionary()
        self._numbers = itertools.count(1)

    def sent(self, request: Request) -> None:
        """``request`` was handed out to the engine."""
        self.arrived(request)  # handed out again (a retry of the same object): counted once
        host = urlparse_cached(request).hostname or ""
        n = next(self._numbers)
        self._by_host.setdefault(host, {})[n] = self.clock()
        self._of[request] = (host, n)

    def arrived(self, request: Request, **_: Any) -> None:
        """``request`` reached the downloader (its slot counts it now), or went elsewhere."""
        got = self._of.pop(request, None)
        if got is None:
            return
        host, n = got
        held = self._by_host.get(host)
        if held is not None:
            held.pop(n, None)
            if not held:
                del self._by_host[host]

    def pending(self, host: str) -> int:
        """Requests to ``host`` handed out and not in its slot yet."""
        held = self._by_host.get(host)
        if not held:
            return 0
        now = self.clock()
        for n, at in list(held.items()):
            if not now - TTL <= at <= now + TTL:  # past its time, or a clock that stepped back
                del held[n]
        if not held:
            del self._by_host[host]
        return len(held)
