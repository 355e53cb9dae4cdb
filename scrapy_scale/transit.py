"""Requests handed out and not yet where a component waits for them, counted per key.

The scheduler hands a request to the engine, the engine gives it to the downloader, and
its middlewares run before the request reaches the point a component counts it at (its
download slot, the egress pool). Some middlewares await (robots.txt's check does while
the host's robots.txt is on its way) and the engine asks the scheduler again meanwhile:
a component that counted only what reached it would see room that requests already
handed out will take, and let more out than it can carry.

So a request handed out counts under its key (a host, a site) until it arrives
(:meth:`Transit.arrived`), and only while the downloader still has it
(``Downloader.active``, which the engine fills before the middlewares run): one a
middleware answered (an HTTP cache hit), dropped (a robots.txt disallow, offsite) or
replaced stops counting at once. Without that view of the downloader, a request stops
counting after :data:`TTL` seconds, or once the clock stepped back past it. Keyed by the
request object, weakly: nothing is written into its meta, a copy of it (a retry, a
request that copied ``response.meta``) holds nothing, another request arriving (Scrapy's
own robots.txt download) frees nothing, and a request collected as garbage is forgotten.

Used by the frontier (:mod:`scrapy_scale.frontier.scheduling.slot_transit`: on the way to a download
slot) and the throttle (:class:`scrapy_scale.throttle.routing.RouteLearner`: on the way
to the egress pool, holding one of its site's free routes).
"""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Request

#: seconds a request handed out counts at most when the downloader's requests are not known
TTL = 1.0

#: the requests the downloader has now; None when that is not known
InDownloader = Callable[[], "Container[Request] | None"]


class Transit:
    def __init__(self, in_downloader: InDownloader | None = None, clock: Callable[[], float] = time.monotonic):
        #: the requests the downloader has (between ``fetch`` and its end); None: unknown
        self.in_downloader = in_downloader
        self.clock = clock
        #: per key: request number -> (the request, weakly; when handed out)
        self._by_key: dict[str, dict[int, tuple[weakref.ref[Request], float]]] = {}
        self._of: weakref.WeakKeyDictionary[Request, tuple[str, int]] = weakref.WeakKeyDictionary()
        self._numbers = itertools.count(1)
        #: requests that stopped counting because the downloader no longer had them (answered,
        #: dropped or replaced in a middleware), and past :data:`TTL` (the view unknown)
        self.left_downloader = 0
        self.expired = 0

    def sent(self, request: Request, key: str | None) -> None:
        """``request`` was handed out to the engine: it counts under ``key`` (None: under
        none). Handed out again (the same object), it counts once, under its new key."""
        self.arrived(request)
        if key is None:
            return
        n = next(self._numbers)

        def collected(_: weakref.ref[Request]) -> None:  # garbage: nothing else would prune it
            self._forget(key, n)

        self._by_key.setdefault(key, {})[n] = (weakref.ref(request, collected), self.clock())
        self._of[request] = (key, n)

    def arrived(self, request: Request, **_: Any) -> None:
        """``request`` got where it was going (or went back, or ended): it counts no more.
        A request not counted (another's copy, robots.txt's) changes nothing."""
        got = self._of.pop(request, None)
        if got is not None:
            self._forget(*got)

    def clear(self) -> None:
        """Forget every request on its way (the worker stops)."""
        self._by_key.clear()
        self._of.clear()

    @property
    def counted_keys(self) -> frozenset[str]:
        """The keys that count a request now, as last pruned (``pending`` prunes a key): an
        empty set once every request has arrived, ended or expired (nothing kept per key)."""
        return frozenset(self._by_key)

    def _forget(self, key: str, n: int) -> None:
        held = self._by_key.get(key)
        if held is not None:
            held.pop(n, None)
            if not held:
                del self._by_key[key]

    def pending(self, key: str) -> int:
        """Requests counted under ``key``: handed out, not arrived, still on their way."""
        held = self._by_key.get(key)
        if not held:
            return 0
        active = self.in_downloader() if self.in_downloader is not None else None
        now = self.clock()
        for n, (ref, at) in list(held.items()):
            r = ref()
            if r is not None:
                if active is not None:
                    if r in active:
                        continue
                    self.left_downloader += 1  # answered, dropped or replaced in a middleware
                elif now - TTL <= at <= now + TTL:
                    continue
                else:
                    self.expired += 1  # past its grace, or from before a clock that stepped back
                self._of.pop(r, None)
            self._forget(key, n)
        return len(self._by_key.get(key, ()))
