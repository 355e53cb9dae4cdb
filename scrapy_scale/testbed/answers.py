"""How a target host answers one request: bans, per-client rate limits, faults, the catalog.

:class:`Answering` is the part of :class:`~scrapy_scale.testbed.server.Testbed` that
decides each answer (and logs it); the protocol in ``target.py`` sends it.
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from scrapy_scale.testbed.capacity import CapacityPlan
from scrapy_scale.testbed.catalog import BLOCK_PAGE, Catalog, robots_txt
from scrapy_scale.testbed.faults import Fault
from scrapy_scale.testbed.log import Served


class Answer:
    __slots__ = ("status", "body", "headers", "kind", "delay")

    def __init__(
        self,
        status: int | None,
        kind: str,
        body: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
        delay: float = 0.0,
    ):
        self.status = status
        self.kind = kind
        self.body = body
        self.headers = headers
        self.delay = delay


class Answering:
    """Decides and logs the answer of a target host; mixed into the Testbed, which owns the state."""

    seed: int
    hosts: list[str]
    catalog: Catalog
    faults: list[Fault]
    rate_limit: float | Mapping[str | int, float] | None
    robots: bytes
    keep_log: bool
    _fault_since: dict[int, float]  # rule index -> its first selected request (until=)
    _disallow: list[str]
    _crawl_delay: float | Mapping[str | int, float] | None
    host_numbers: dict[str, int]
    _banned: set[tuple[int, str]]
    _buckets: dict[tuple[int, str], tuple[float, float]]
    _capacity: CapacityPlan | None
    _track_ordinals: bool
    _ordinals: Counter[tuple[int, str]]
    _lock: threading.Lock
    _log: list[Served]
    _counters: Counter[tuple[str, Any]]

    def _per_host(self, value: float | Mapping[str | int, float] | None, host_no: int) -> float | None:
        """A per-host option: one value for every host, or a dict by host name or number."""
        if value is None or not isinstance(value, Mapping):
            return value
        for h, v in value.items():
            if self._host_no(h) == host_no:
                return v
        return None

    def _host_no(self, h: str | int) -> int:
        if isinstance(h, int) or (isinstance(h, str) and h.isdigit()):
            n = int(h)
            if not 1 <= n <= len(self.hosts):
                raise ValueError(f"no host number {n}")
            return n
        if h not in self.host_numbers:
            raise ValueError(f"no host {h!r}")
        return self.host_numbers[h]

    def _rate_ok(self, host_no: int, client: str, now: float) -> bool:
        rate = self._per_host(self.rate_limit, host_no)
        if not rate:
            return True
        key = (host_no, client)
        tokens, last = self._buckets.get(key, (max(rate, 1.0), now))
        tokens = min(max(rate, 1.0), tokens + (now - last) * rate)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1, now)
        return True

    def answer(self, host_no: int, target: str, egress: str | None, client: str, conn: int, method: str) -> Answer:
        now = time.time()
        host = self.hosts[host_no - 1]
        path = target.split("?", 1)[0]
        ordinal = 0
        if self._track_ordinals:
            with self._lock:
                self._ordinals[(host_no, target)] += 1
                ordinal = self._ordinals[(host_no, target)]
        ans = self._decide(host_no, host, path, egress, client, ordinal, now)
        if self._capacity is not None:
            ans = self._capacity.shape(ans, host_no, path, now)
        rec = Served(now, host, target, method, egress, client, conn, ans.status, ans.kind, ordinal)
        with self._lock:
            if self.keep_log:
                self._log.append(rec)
            self._counters[(host, ans.kind)] += 1
            if ans.status is not None:
                self._counters[(host, ans.status)] += 1
        return ans

    def _decide(
        self, host_no: int, host: str, path: str, egress: str | None, client: str, ordinal: int, now: float
    ) -> Answer:
        if egress is not None and (host_no, egress) in self._banned:
            return Answer(403, "banned", b"<html><body>Access denied</body></html>")
        if not self._rate_ok(host_no, egress or client, now):
            return Answer(429, "rate_limited", b"<html><body>Slow down</body></html>", [("Retry-After", "1")])
        for idx, f in enumerate(self.faults):
            if f.kind == "layout" and self.catalog.item_id(path) is None:
                continue
            if not f.selects(host, host_no, path, egress):
                continue
            if f.until is not None and not f.active(self._fault_since.setdefault(idx, now), now):
                continue
            if f.fires(self.seed, idx, host, path, ordinal):
                return self._fault_answer(f, host_no, path, now)
        return self._normal(host_no, path)

    def _normal(self, host_no: int, path: str, kind: str = "ok", delay: float = 0.0) -> Answer:
        if path == "/robots.txt":
            body = self.robots
            crawl_delay = self._per_host(self._crawl_delay, host_no)
            if crawl_delay is not None:
                body = robots_txt(self._disallow, crawl_delay)
            return Answer(200, "robots" if kind == "ok" else kind, body, delay=delay)
        item_id = self.catalog.item_id(path)
        if item_id is not None:
            return Answer(200, kind, self.catalog.item_html(host_no, item_id), delay=delay)
        k = self.catalog.list_no(path)
        if k is not None:
            return Answer(200, kind, self.catalog.listing_html(host_no, k), delay=delay)
        return Answer(404, "not_found", b"<html><body>Not found</body></html>", delay=delay)

    def _fault_answer(self, f: Fault, host_no: int, path: str, now: float) -> Answer:
        k = f.kind
        if k in ("429", "503"):
            headers: list[tuple[str, str]] = []
            if isinstance(f.retry_after, str):
                when = now + int(f.retry_after.split(":", 1)[1])
                headers.append(("Retry-After", email.utils.formatdate(when, usegmt=True)))
            elif f.retry_after is not None:
                headers.append(("Retry-After", str(f.retry_after)))
            return Answer(int(k), k, f"<html><body>Error {k}</body></html>".encode(), headers)
        if k in ("500", "404", "410", "403"):
            return Answer(int(k), k, f"<html><body>Error {k}</body></html>".encode())
        if k in ("reset", "hang"):
            return Answer(None, k)
        if k == "slow":
            return self._normal(host_no, path, kind="slow", delay=f.delay)
        if k == "block":
            return Answer(200, "block", BLOCK_PAGE)
        if k == "empty":
            return Answer(200, "empty", b"")
        if k == "layout":
            item_id = self.catalog.item_id(path)
            assert item_id is not None
            return Answer(200, "layout", self.catalog.item_html(host_no, item_id, f.variant))
        raise AssertionError(k)
