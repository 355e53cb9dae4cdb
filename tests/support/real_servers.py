"""Real third-party servers on loopback for the tests: nginx serving static sites,
tinyproxy and Squid egresses (Debian packages), never the system services.

Each runs in the foreground from a config written into a temporary folder, on a free
port, and is stopped at teardown. Every proxy binds its outgoing connections to its own
127.0.0.x address, so nginx's access log tells which proxy each request came through.
A missing program fails the test saying how to get it (``system_tools.need``), as for the
other services of tests/support/services.py.

    with RealSites(tmp_path / "nginx", [Site("a", pages=20, rate=3)]) as web, \\
         Tinyproxy(tmp_path / "tp1", out="127.0.2.1") as tp:
        web.start_urls; tp.url; web.requests()  # the access log, parsed

What the servers answer is theirs: nginx's ``limit_req`` refusals (429, or its default
503), a ``deny`` (403), tinyproxy's and Squid's own error pages when their upstream is
dead (``dead_upstream``: a port nothing listens on).
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support import system_tools
from tests.support.services import LOOPBACK, Process, free_port, port_open


@dataclass(frozen=True)
class Site:
    """One static site: ``pages`` detail pages linked from listings of ``per_page``
    links, on its own loopback address ``addr`` (its host name for the crawl)."""

    name: str
    addr: str
    pages: int = 20
    per_page: int = 10
    #: requests a second per client address (nginx ``limit_req``), None for no limit
    rate: float | None = None
    burst: int = 2
    #: the status of a refused request: 429, or nginx's default 503
    limit_status: int = 429
    #: ``Retry-After`` seconds on the refusal (None: no header)
    retry_after: int | None = None
    crawl_delay: float | None = None
    #: client addresses nginx answers 403
    deny: tuple[str, ...] = ()
    #: share of requests (robots.txt aside) nginx answers its own 503 at random, before
    #: the rate limit sees them (``split_clients`` on the request id)
    noise: float = 0.0


def _write_site(root: Path, site: Site) -> None:
    root.mkdir(parents=True, exist_ok=True)
    robots = "User-agent: *\nAllow: /\n"
    if site.crawl_delay is not None:
        robots += f"Crawl-delay: {site.crawl_delay:g}\n"
    (root / "robots.txt").write_text(robots)
    (root / "item").mkdir(exist_ok=True)
    (root / "list").mkdir(exist_ok=True)
    listings = max(1, -(-site.pages // site.per_page))
    for n in range(1, site.pages + 1):
        (root / "item" / f"{n}.html").write_text(
            f"<html><body><h1 class='title'>{site.name} item {n}</h1>"
            f"<span class='sku'>{site.name}-{n}</span><span class='price'>{n}.5</span></body></html>"
        )
    for i in range(1, listings + 1):
        first = (i - 1) * site.per_page + 1
        links = "".join(
            f"<a class='item' href='/item/{n}.html'>{n}</a>"
            for n in range(first, min(site.pages, first + site.per_page - 1) + 1)
        )
        nxt = f"<a class='next' href='/list/{i + 1}.html'>next</a>" if i < listings else ""
        (root / "list" / f"{i}.html").write_text(f"<html><body>{links}{nxt}</body></html>")


class RealSites:
    """nginx serving ``sites``, each on its own address and one common free port."""

    def __init__(self, workdir: Path, sites: list[Site]):
        self.exe = system_tools.need("nginx")
        self.workdir = Path(workdir)
        self.sites = sites
        self.port = free_port()
        self.access_log = self.workdir / "access.log"
        self.proc: Process | None = None

    def url(self, site: Site, path: str) -> str:
        return f"http://{site.addr}:{self.port}{path}"

    @property
    def start_urls(self) -> list[str]:
        return [self.url(s, "/list/1.html") for s in self.sites]

    def detail_urls(self) -> set[str]:
        return {self.url(s, f"/item/{n}.html") for s in self.sites for n in range(1, s.pages + 1)}

    def _config(self) -> str:
        w = self.workdir
        zones, servers = [], []
        for s in self.sites:
            root = w / "sites" / s.name
            _write_site(root, s)
            limit = ""
            if s.rate is not None:
                zones.append(f"limit_req_zone $binary_remote_addr zone={s.name}:1m rate={round(s.rate * 60)}r/m;")
                burst = f" burst={s.burst} nodelay" if s.burst > 0 else ""
                limit = f"limit_req zone={s.name}{burst}; limit_req_status {s.limit_status};"
            denies = "".join(f"deny {a}; " for a in s.deny)
            refused = f"error_page {s.limit_status} = @refused;" if s.rate is not None else ""
            retry = f"add_header Retry-After {s.retry_after} always;" if s.retry_after is not None else ""
            noise = ""
            if s.noise > 0:
                zones.append(f'split_clients "$request_id" $noise_{s.name} {{ {100 * s.noise:g}% 1; * ""; }}')
                noise = f"if ($noise_{s.name}) {{ return 503; }}"
            servers.append(
                f"server {{ listen {s.addr}:{self.port}; root {root}; {denies}"
                f"location / {{ {noise} {limit} {refused} }} location = /robots.txt {{ }} "
                f"location @refused {{ {retry} return {s.limit_status} 'slow down\\n'; }} }}"
            )
        temps = " ".join(
            f"{k}_temp_path {w / 'tmp' / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        return f"""daemon off;
master_process off;
worker_processes 1;
pid {w / "nginx.pid"};
error_log {w / "error.log"} warn;
events {{ worker_connections 512; }}
http {{
  log_format scale '$remote_addr $msec $host $status "$request"';
  access_log {self.access_log} scale;
  {temps}
  {" ".join(zones)}
  {" ".join(servers)}
}}
"""

    def __enter__(self) -> RealSites:
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "nginx.conf"
        conf.write_text(self._config())
        first = self.sites[0].addr
        self.proc = Process(
            "nginx",
            [self.exe, "-p", str(self.workdir), "-c", str(conf), "-e", str(self.workdir / "error.log")],
            self.port,
            self.workdir,
            lambda: port_open(self.port, first),
        )
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stop()

    def requests(self) -> list[dict[str, Any]]:
        """The access log: one dict per request (client, t, host, status, path)."""
        out = []
        if not self.access_log.exists():
            return out
        for line in self.access_log.read_text().splitlines():
            client, t, host, status, req = line.split(" ", 4)
            parts = req.strip('"').split(" ")
            out.append(
                {
                    "client": client,
                    "t": float(t),
                    "host": host,
                    "status": int(status),
                    "path": parts[1] if len(parts) > 1 else "",
                }
            )
        return out


class _Proxy:
    name = ""

    def __init__(self, workdir: Path, out: str, dead_upstream: bool = False):
        self.workdir = Path(workdir)
        self.out = out
        self.dead_upstream = dead_upstream
        self.port = free_port()
        self.dead_port = free_port() if dead_upstream else None
        self.proc: Process | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def argv(self) -> list[str]:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.proc = Process(self.name, self.argv(), self.port, self.workdir, lambda: port_open(self.port))
            self.proc.start()
        except BaseException:  # pytest.fail too: what was made is cleaned up
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.proc is not None:
            self.proc.stop()


class Tinyproxy(_Proxy):
    """tinyproxy, its outgoing connections from ``out``; ``dead_upstream``: it forwards
    everything to an upstream proxy on a port nothing listens on."""

    name = "tinyproxy"

    def argv(self) -> list[str]:
        exe = system_tools.need("tinyproxy")
        w = self.workdir
        lines = [
            f"Port {self.port}",
            f"Listen {LOOPBACK}",
            f"Bind {self.out}",
            "Timeout 30",
            "MaxClients 200",
            f'LogFile "{w / "tinyproxy.log"}"',
            "LogLevel Connect",
            f'PidFile "{w / "tinyproxy.pid"}"',
        ]
        if os.geteuid() == 0:
            lines += ["User root", "Group root"]
        if self.dead_upstream:
            lines.append(f"Upstream http {LOOPBACK}:{self.dead_port}")
        conf = w / "tinyproxy.conf"
        conf.write_text("\n".join(lines) + "\n")
        return [exe, "-d", "-c", str(conf)]


class Squid(_Proxy):
    """Squid without a disk cache, its outgoing connections from ``out``;
    ``dead_upstream``: a parent ``cache_peer`` on a dead port and ``never_direct``.

    Run as root, Squid drops to its ``cache_effective_user`` (``proxy``): its folder is a
    fresh temporary one that user owns (the test's tmp_path is root's alone)."""

    name = "squid"

    home: Path | None = None

    def argv(self) -> list[str]:
        exe = system_tools.need("squid")
        h = self.home = Path(tempfile.mkdtemp(prefix="scale-squid-"))
        user = []
        if os.geteuid() == 0:
            os.chmod(h, 0o755)
            shutil.chown(h, "proxy", "proxy")
            user = ["cache_effective_user proxy", "cache_effective_group proxy"]
        lines = [
            f"http_port {LOOPBACK}:{self.port}",
            f"tcp_outgoing_address {self.out}",
            "http_access allow all",
            "visible_hostname scale-test",
            f"pid_filename {h / 'squid.pid'}",
            f"access_log stdio:{h / 'access.log'}",
            f"cache_log {h / 'cache.log'}",
            f"coredump_dir {h}",
            "cache deny all",
            "dns_nameservers 127.0.0.1",
            "shutdown_lifetime 0 seconds",
            "forwarded_for delete",
            *user,
        ]
        if self.dead_upstream:
            lines += [
                f"cache_peer {LOOPBACK} parent {self.dead_port} 0 no-query no-digest",
                "never_direct allow all",
            ]
        conf = h / "squid.conf"
        conf.write_text("\n".join(lines) + "\n")
        (self.workdir / "squid.conf").write_text(conf.read_text())
        return [exe, "-N", "-f", str(conf)]

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        super().__exit__(t, e, tb)
        if self.home is None:
            return
        for name in ("access.log", "cache.log"):
            if (self.home / name).exists():
                shutil.copy(self.home / name, self.workdir / name)
        shutil.rmtree(self.home, ignore_errors=True)


class Blackhole:
    """An egress that accepts connections, reads what it is sent and never answers nor
    closes (what no installed proxy does on demand): a thread in this process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.accepted = 0
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def __enter__(self) -> Blackhole:
        self._sock = socket.create_server((LOOPBACK, self.port), backlog=512)
        self._thread = threading.Thread(target=self._serve, name="blackhole", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        assert self._sock is not None
        sel = selectors.DefaultSelector()
        self._sock.setblocking(False)
        sel.register(self._sock, selectors.EVENT_READ)
        held: list[socket.socket] = []
        while not self._stop.is_set():
            for key, _ in sel.select(timeout=0.2):
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                if conn is self._sock:
                    c, _addr = conn.accept()
                    c.setblocking(False)
                    self.accepted += 1
                    held.append(c)
                    sel.register(c, selectors.EVENT_READ)
                else:
                    try:
                        gone = not conn.recv(65536)
                    except OSError:  # reset by the client
                        gone = True
                    if gone:  # the client closed: let it go
                        sel.unregister(conn)
                        conn.close()
        for c in held:
            c.close()
        sel.close()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None:
            self._sock.close()
