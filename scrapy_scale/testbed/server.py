"""The testbed: target hosts and proxies on loopback, served by one asyncio loop in a thread."""

from __future__ import annotations

import asyncio
import email.utils
import errno
import functools
import ipaddress
import json
import os
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale.testbed import resolver
from scrapy_scale.testbed.capacity import Capacity, CapacityPlan
from scrapy_scale.testbed.catalog import BLOCK_PAGE, Catalog, robots_txt
from scrapy_scale.testbed.faults import Fault, ProxySpec, parse_faults
from scrapy_scale.testbed.log import ProxyEvent, Served

HOST_NAME = "shop{n}.example.test"
_FIRST_HOST_IP = int(ipaddress.IPv4Address("127.0.0.2"))
_FIRST_EGRESS_IP = int(ipaddress.IPv4Address("127.254.0.1"))

REASONS = {
    200: "OK",
    403: "Forbidden",
    404: "Not Found",
    407: "Proxy Authentication Required",
    410: "Gone",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def host_ip(n: int) -> str:
    """Loopback address of host number n (1-based): 127.0.0.2, 127.0.0.3, ..."""
    return str(ipaddress.IPv4Address(_FIRST_HOST_IP + n - 1))


def egress_ip(i: int) -> str:
    """Source address proxy number i (0-based) connects to targets from: 127.254.0.1, ..."""
    return str(ipaddress.IPv4Address(_FIRST_EGRESS_IP + i))


def http_response(
    status: int,
    body: bytes,
    extra: Sequence[tuple[str, str]] = (),
    close: bool = False,
    head_only: bool = False,
    content_type: str = "text/html; charset=utf-8",
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in extra]
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


#: what a ``reset`` fault sends before the RST: the start of an answer, cut mid-headers
RESET_PREFIX = b"HTTP/1.1 200 OK\r\nContent-Type: text/ht"


def reset_transport(transport: asyncio.BaseTransport) -> None:
    """Close with TCP RST (SO_LINGER 0) instead of FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()  # type: ignore[attr-defined]


def reset_mid_answer(transport: asyncio.BaseTransport) -> None:
    """The first bytes of an answer (:data:`RESET_PREFIX`), then RST: what a ``reset`` fault
    (and a flaky proxy) does.

    A reset before any byte is invisible to Scrapy on a reused keep-alive connection:
    Twisted's connection pool then re-sends an idempotent request once by itself
    (``ResponseNeverReceived``). Once a byte came, the client fails the request
    (``ResponseFailed``) and Scrapy sees it. The bytes are in the client's receive queue
    before the RST (loopback, sent at once), and a reset socket still returns queued data
    before its error."""
    assert isinstance(transport, asyncio.WriteTransport)
    transport.write(RESET_PREFIX)
    reset_transport(transport)


class _Answer:
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


class Testbed:
    """Fault-injecting fake internet on loopback. See the package docstring for the API."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        hosts: int = 3,
        pages: int = 100,
        seed: int = 1,
        faults: Iterable[Fault] | str = (),
        proxies: Iterable[ProxySpec] = (),
        rate_limit: float | Mapping[str | int, float] | None = None,
        per_page: int = 20,
        port: int = 0,
        robots_disallow: Iterable[str] = (),
        robots_crawl_delay: float | Mapping[str | int, float] | None = None,
        keep_log: bool = True,
        tls: bool = False,
        capacity: Mapping[str | int, Capacity] | None = None,
    ):
        if hosts < 1:
            raise ValueError("hosts must be >= 1")
        self.seed = seed
        self.pages = pages
        self.catalog = Catalog(seed, pages, per_page)
        self.faults: list[Fault] = parse_faults(faults) if isinstance(faults, str) else list(faults)
        self._fault_since: dict[int, float] = {}  # rule index -> its first selected request (until=)
        self.proxy_specs: list[ProxySpec] = list(proxies)
        if len({p.id for p in self.proxy_specs}) != len(self.proxy_specs):
            raise ValueError("proxy ids must be unique")
        self.rate_limit = rate_limit
        self._disallow = list(robots_disallow)
        self._crawl_delay = robots_crawl_delay
        self.robots = robots_txt(self._disallow)
        self.keep_log = keep_log
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.hosts: list[str] = [HOST_NAME.format(n=n) for n in range(1, hosts + 1)]
        self.host_numbers = {name: n for n, name in enumerate(self.hosts, 1)}
        self.addresses = {name: host_ip(n) for name, n in self.host_numbers.items()}
        self.egress_by_ip = {egress_ip(i): p.id for i, p in enumerate(self.proxy_specs)}
        self._banned: set[tuple[int, str]] = set()
        for p in self.proxy_specs:
            for h in p.banned_by:
                self._banned.add((self._host_no(h), p.id))
        self.port = port
        self.proxy_ports: dict[str, int] = {}
        self._log: list[Served] = []
        self._proxy_log: list[ProxyEvent] = []
        self._counters: Counter[tuple[str, Any]] = Counter()
        self._ordinals: Counter[tuple[int, str]] = Counter()
        # per-path ordinals cost memory per distinct URL: kept only when the log or a fault needs them
        self._track_ordinals = keep_log or bool(self.faults)
        self._buckets: dict[tuple[int, str], tuple[float, float]] = {}
        self._capacity = CapacityPlan(capacity, self._host_no) if capacity else None  # testbed/capacity.py
        self._lock = threading.Lock()
        self._conn_ids = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._transports: set[asyncio.BaseTransport] = set()
        self._dead_sockets: list[socket.socket] = []
        self._proxy_writers: set[asyncio.StreamWriter] = set()

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

    @classmethod
    def view(cls, state: dict[str, Any] | str | os.PathLike[str]) -> Testbed:
        """A not-started Testbed describing one that runs elsewhere (the CLI's ``--state-file``
        or its dict): ``start_urls``, ``detail_urls()``, ``expected_item()``, ``addresses``."""
        if isinstance(state, dict):
            info: dict[str, Any] = state
        else:
            with open(state) as f:
                info = json.load(f)
        return cls(
            hosts=len(info["hosts"]),
            pages=info["pages_per_host"],
            seed=info["seed"],
            per_page=info.get("per_page", 20),
            port=info["port"],
            tls=info.get("tls", False),
        )

    # ---- lifecycle ----------------------------------------------------------------

    def start(self, timeout: float = 30) -> Testbed:
        """Serve (again: after stop(), a restart keeps the ports, log and counters)."""
        if self._thread is not None:
            raise RuntimeError("testbed already started")
        self._ready = threading.Event()
        self._error = None
        self._servers = []
        self._dead_sockets = []
        self._thread = threading.Thread(target=self._run, name="testbed", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("testbed did not start in time")
        if self._error is not None:
            raise RuntimeError(f"testbed failed to start: {self._error!r}") from self._error
        resolver.register(self.addresses)
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        resolver.unregister(self.addresses)
        if loop.is_running():
            loop.call_soon_threadsafe(self._shutdown)
        thread.join(10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> Testbed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._astart())
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    def _shutdown(self) -> None:
        for s in self._servers:
            s.close()
        for t in list(self._transports):
            t.abort()  # type: ignore[attr-defined]
        for w in list(self._proxy_writers):
            w.transport.abort()
        for sock in self._dead_sockets:
            sock.close()
        assert self._loop is not None
        self._loop.stop()

    async def _astart(self) -> None:
        loop = asyncio.get_running_loop()
        ssl_ctx = None
        if self.tls:
            from scrapy_scale.testbed.tls import server_context

            ssl_ctx = server_context()
        for _attempt in range(50):
            servers: list[asyncio.AbstractServer] = []
            port = self.port
            try:
                for name, n in self.host_numbers.items():
                    srv = await loop.create_server(
                        functools.partial(_TargetProtocol, self, n),
                        host=self.addresses[name],
                        port=port,
                        reuse_address=True,
                        backlog=1024,
                        ssl=ssl_ctx,
                    )
                    port = srv.sockets[0].getsockname()[1]
                    servers.append(srv)
            except OSError as e:
                for s in servers:
                    s.close()
                if e.errno == errno.EADDRINUSE and self.port == 0:
                    continue
                raise
            self.port = port
            self._servers.extend(servers)
            break
        else:
            raise OSError("no port free on every host address")
        from scrapy_scale.testbed.proxy import start_proxy

        for i, spec in enumerate(self.proxy_specs):
            if spec.mode == "dead":
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                # bound, never listening: connections are refused
                sock.bind(("127.0.0.1", self.proxy_ports.get(spec.id, 0)))
                self._dead_sockets.append(sock)
                self.proxy_ports[spec.id] = sock.getsockname()[1]
                continue
            proxy_srv = await start_proxy(self, spec, egress_ip(i), self.proxy_ports.get(spec.id, 0))
            self._servers.append(proxy_srv)
            self.proxy_ports[spec.id] = proxy_srv.sockets[0].getsockname()[1]

    def set_faults(self, faults: Iterable[Fault] | str) -> None:
        """Replace the fault rules while serving (e.g. a layout change or a ban mid-crawl).
        Plans keep counting from the requests already served."""
        new = parse_faults(faults) if isinstance(faults, str) else list(faults)
        self._track_ordinals = True
        self._fault_since = {}
        self.faults = new

    # ---- public view --------------------------------------------------------------

    @property
    def start_urls(self) -> list[str]:
        return [f"{self.scheme}://{h}:{self.port}/" for h in self.hosts]

    @property
    def proxy_urls(self) -> list[str]:
        return [self.proxy_url(p.id) for p in self.proxy_specs]

    def proxy_url(self, proxy_id: str) -> str:
        spec = next(p for p in self.proxy_specs if p.id == proxy_id)
        cred = f"{spec.user}:{spec.password}@" if spec.mode == "auth" else ""
        return f"http://{cred}127.0.0.1:{self.proxy_ports[proxy_id]}"

    def scrapy_settings(self) -> dict[str, Any]:
        """Settings that make the host names resolve in Scrapy (and nothing else)."""
        return {
            "TWISTED_DNS_RESOLVER": resolver.RESOLVER_PATH,
            resolver.HOSTS_SETTING: dict(self.addresses),
        }

    @property
    def log(self) -> list[Served]:
        return list(self._log)

    @property
    def proxy_log(self) -> list[ProxyEvent]:
        return list(self._proxy_log)

    @property
    def counters(self) -> Counter[tuple[str, Any]]:
        """Counts keyed (host, kind) with kind a str, and (host, status) with status an int."""
        with self._lock:
            return Counter(self._counters)

    def count(
        self,
        *,
        host: str | None = None,
        kind: str | None = None,
        status: int | None = None,
        path: str | None = None,
        egress: str | None | bool = False,
    ) -> int:
        """Records of the log matching every given field (egress=None means direct)."""
        return sum(
            1
            for r in self._log
            if (host is None or r.host == host)
            and (kind is None or r.kind == kind)
            and (status is None or r.status == status)
            and (path is None or r.path == path)
            and (egress is False or r.egress == egress)
        )

    def clear_log(self) -> None:
        """Forget the log and counters (the per-path ordinals that plans use are kept)."""
        with self._lock:
            self._log.clear()
            self._proxy_log.clear()
            self._counters.clear()

    def detail_urls(self) -> set[str]:
        return {f"{self.scheme}://{h}:{self.port}/item/{i}" for h in self.hosts for i in range(1, self.pages + 1)}

    def expected_item(self, url: str) -> dict[str, Any]:
        u = urlsplit(url)
        n = self.host_numbers[u.hostname or ""]
        item_id = self.catalog.item_id(u.path)
        if item_id is None:
            raise ValueError(f"not a detail page URL: {url}")
        return {**self.catalog.item_data(n, item_id), "url": url}

    # ---- serving ------------------------------------------------------------------

    def _next_conn(self) -> int:
        self._conn_ids += 1
        return self._conn_ids

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

    def _answer(self, host_no: int, target: str, egress: str | None, client: str, conn: int, method: str) -> _Answer:
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
    ) -> _Answer:
        if egress is not None and (host_no, egress) in self._banned:
            return _Answer(403, "banned", b"<html><body>Access denied</body></html>")
        if not self._rate_ok(host_no, egress or client, now):
            return _Answer(429, "rate_limited", b"<html><body>Slow down</body></html>", [("Retry-After", "1")])
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

    def _normal(self, host_no: int, path: str, kind: str = "ok", delay: float = 0.0) -> _Answer:
        if path == "/robots.txt":
            body = self.robots
            crawl_delay = self._per_host(self._crawl_delay, host_no)
            if crawl_delay is not None:
                body = robots_txt(self._disallow, crawl_delay)
            return _Answer(200, "robots" if kind == "ok" else kind, body, delay=delay)
        item_id = self.catalog.item_id(path)
        if item_id is not None:
            return _Answer(200, kind, self.catalog.item_html(host_no, item_id), delay=delay)
        k = self.catalog.list_no(path)
        if k is not None:
            return _Answer(200, kind, self.catalog.listing_html(host_no, k), delay=delay)
        return _Answer(404, "not_found", b"<html><body>Not found</body></html>", delay=delay)

    def _fault_answer(self, f: Fault, host_no: int, path: str, now: float) -> _Answer:
        k = f.kind
        if k in ("429", "503"):
            headers: list[tuple[str, str]] = []
            if isinstance(f.retry_after, str):
                when = now + int(f.retry_after.split(":", 1)[1])
                headers.append(("Retry-After", email.utils.formatdate(when, usegmt=True)))
            elif f.retry_after is not None:
                headers.append(("Retry-After", str(f.retry_after)))
            return _Answer(int(k), k, f"<html><body>Error {k}</body></html>".encode(), headers)
        if k in ("500", "404", "410", "403"):
            return _Answer(int(k), k, f"<html><body>Error {k}</body></html>".encode())
        if k in ("reset", "hang"):
            return _Answer(None, k)
        if k == "slow":
            return self._normal(host_no, path, kind="slow", delay=f.delay)
        if k == "block":
            return _Answer(200, "block", BLOCK_PAGE)
        if k == "empty":
            return _Answer(200, "empty", b"")
        if k == "layout":
            item_id = self.catalog.item_id(path)
            assert item_id is not None
            return _Answer(200, "layout", self.catalog.item_html(host_no, item_id, f.variant))
        raise AssertionError(k)


class _TargetProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, one request at a time per connection (pipelining queues)."""

    def __init__(self, tb: Testbed, host_no: int):
        self.tb = tb
        self.host_no = host_no
        self.buf = b""
        self.busy = False
        self.closed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.tb._transports.add(transport)
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if peer else "?"
        self.egress = self.tb.egress_by_ip.get(self.client)
        self.conn = self.tb._next_conn()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.transport is not None:
            self.tb._transports.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > 1 << 20:
            reset_transport(self.transport)  # type: ignore[arg-type]
            return
        self._process()

    def _process(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                self._write(http_response(400, b"bad request", close=True), close=True)
                return
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            if target.startswith(("http://", "https://")):
                u = urlsplit(target)
                target = (u.path or "/") + (f"?{u.query}" if u.query else "")
            conn_hdr = headers.get("connection", "").lower()
            close = conn_hdr == "close" or (version == "HTTP/1.0" and conn_hdr != "keep-alive")
            ans = self.tb._answer(self.host_no, target, self.egress, self.client, self.conn, method)
            if ans.kind == "reset":
                self.closed = True
                assert self.transport is not None
                reset_mid_answer(self.transport)
                return
            if ans.kind == "hang":
                self.busy = True
                return
            assert ans.status is not None
            data = http_response(
                ans.status,
                ans.body,
                ans.headers,
                close,
                method == "HEAD",
                "text/plain" if target == "/robots.txt" else "text/html; charset=utf-8",
            )
            if ans.delay > 0:
                self.busy = True
                loop = asyncio.get_running_loop()
                loop.call_later(ans.delay, self._send_later, data, close)
                return
            self._write(data, close)

    def _send_later(self, data: bytes, close: bool) -> None:
        self.busy = False
        if self.closed:
            return
        self._write(data, close)
        self._process()

    def _write(self, data: bytes, close: bool) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if close:
            self.closed = True
            self.transport.close()
