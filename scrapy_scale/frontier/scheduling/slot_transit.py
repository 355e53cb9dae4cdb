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
(``Downloader.active``): one a middleware answered, dropped or replaced (the egress
pool's wait, the not-before guard) stops counting at once, and the engine asks again
when that download ends; without that view, after :data:`TTL` seconds. The rule and its
bookkeeping are :class:`scrapy_scale.transit.Transit`'s (the throttle's route holds
follow it too), keyed here by host. A request whose download slot is keyed otherwise
(``download_slot`` meta) is not counted: its host's slot is not the one it waits for.
"""

from __future__ import annotations

from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

from scrapy_scale.transit import TTL, Transit

__all__ = ["TTL", "SlotTransit"]


class SlotTransit(Transit):
    """:class:`Transit` keyed by the host whose download slot a request waits for."""

    def sent(self, request: Request, key: str | None = None) -> None:
        """``request`` was handed out to the engine (``key``: its host, found when None)."""
        if key is None:
            key = urlparse_cached(request).hostname or ""
            slot = request.meta.get("download_slot")
            if slot is not None and slot != key:
                key = None  # its slot is not its host's
        super().sent(request, key)
