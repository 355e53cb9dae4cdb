"""The testbed: target hosts and proxies on loopback, served by one asyncio loop in a thread.

The parts: ``wire.py`` (addresses, HTTP answers, resets), ``answers.py`` (what a host
answers: bans, rate limits, faults, the catalog), ``target.py`` (the hosts' HTTP
protocol), ``proxy.py`` (the egresses); this module starts and stops them and is the
public view (``Testbed``).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import os
import socket
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale.testbed import resolver
from scrapy_scale.testbed.answers import Answering
from scrapy_scale.testbed.capacity import Capacity, CapacityPlan
from scrapy_scale.testbed.catalog import Catalog, robots_txt
from scrapy_scale.testbed.faults import Fault, ProxySpec, parse_faults
from scrapy_scale.testbed.hosting import Gate, OpenConnections
from scrapy_scale.testbed.log import ProxyEvent, Served
from scrapy_scale.testbed.proxy import start_proxy
from scrapy_scale.testbed.target import TargetProtocol
from scrapy_scale.testbed.wire import (
    HOST_NAME,
    RESET_PREFIX,
    egress_ip,
    host_ip,
    http_response,
    reset_mid_answer,
    reset_transport,
)

#: re-exported: older callers import these from here (they live in wire.py)
__all__ = [
    "HOST_NAME",
    "RESET_PREFIX",
    "Testbed",
    "egress_ip",
    "host_ip",
    "http_response",
    "reset_mid_answer",
    "reset_transport",
]


class Testbed(Answering):
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._servers: list[asyncio.AbstractServer] = []
        #: the servers' connections open now (testbed/hosting.py)
        self.open_connections = OpenConnections()
        #: answers held back between :meth:`hold` and :meth:`release`
        self.gate = Gate()
        self._dead_sockets: list[socket.socket] = []

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
        self.open_connections.abort_all()
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
                        functools.partial(TargetProtocol, self, n),
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

    def hold(self) -> None:
        """Hold every answer of the target hosts (requests are logged) until :meth:`release`:
        a test's gate ("nothing answers until the fleet's workers have all joined")."""
        self.gate.shut = True

    def release(self) -> int:
        """Send the held answers, answer at once from now on; how many answers waited."""
        assert self._loop is not None
        return self.gate.open_from(self._loop)

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

    def log_proxy_event(self, event: ProxyEvent) -> None:
        """A proxy's event, kept for :attr:`proxy_log` when the testbed keeps its log."""
        if self.keep_log:
            self._proxy_log.append(event)

    @property
    def connections(self) -> int:
        """How many connections the target hosts accepted (a client that reuses its
        keep-alive connections opens few)."""
        return self.open_connections.accepted
