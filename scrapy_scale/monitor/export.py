"""Where the metrics go: an HTTP ``/metrics`` endpoint (+ a Prometheus file_sd target
file), a Pushgateway group, a node_exporter textfile. Plain Python over prometheus-client;
each takes the crawl's own ``CollectorRegistry``.

Safe for many crawls on one host (scrapyd starts a process per job): the endpoint takes
the first free port of a range, each process writes its own file_sd file (named by job,
host and pid, removed at close; files of dead processes of this host are removed at
start), and a Pushgateway group is keyed by job, spider, worker and scrapyd's job id.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

from prometheus_client import (
    delete_from_gateway,
    push_to_gateway,
    start_http_server,
    write_to_textfile,
)
from prometheus_client.registry import CollectorRegistry

from scrapy_scale.errors import ScaleError
from scrapy_scale.pids import pid_alive


class MetricsPortError(ScaleError, OSError):
    """No port of ``SCALE_METRICS_PORT`` could be bound."""


class MetricsServer:
    """``/metrics`` over HTTP on the first free port of ``ports`` (``(0, 0)``: any free port)."""

    def __init__(self, registry: CollectorRegistry, host: str, ports: tuple[int, int]):
        self.registry = registry
        self.host = host
        self.ports = ports
        self.port: int | None = None
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> int:
        lo, hi = self.ports
        last: OSError | None = None
        for port in range(lo, hi + 1):
            try:
                self._server, self._thread = start_http_server(port, addr=self.host, registry=self.registry)
            except OSError as e:
                if e.errno not in (errno.EADDRINUSE, errno.EACCES):
                    raise MetricsPortError(f"SCALE_METRICS_PORT: cannot listen on {self.host}:{port}: {e}") from e
                last = e
                continue
            self.port = int(self._server.server_address[1])
            return self.port
        where = f"{lo}" if lo == hi else f"{lo}-{hi}"
        raise MetricsPortError(f"SCALE_METRICS_PORT: no free port in {where} on {self.host} ({last})")

    @property
    def address(self) -> str:
        host = self.host
        if host in ("", "0.0.0.0", "::"):  # listening everywhere: advertise this host's name
            host = socket.getfqdn()
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80] or "_"


class FileSD:
    """One Prometheus ``file_sd`` target file for this process in ``folder``:
    ``[{"targets": ["127.0.0.1:9411"], "labels": {...}}]``, written atomically.

    Point Prometheus at ``folder/*.json`` (``file_sd_configs``); it notices new and
    removed files by itself.
    """

    def __init__(self, folder: str | Path, job: str, pid: int | None = None, hostname: str | None = None):
        self.folder = Path(folder)
        self.pid = os.getpid() if pid is None else pid
        self.hostname = hostname or socket.gethostname()
        self.path = self.folder / f"{_safe(job)}-{_safe(self.hostname)}-{self.pid}.json"

    def write(self, address: str, labels: dict[str, str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.remove_dead()
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps([{"targets": [address], "labels": labels}], indent=1) + "\n")
        os.replace(tmp, self.path)

    def remove(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def remove_dead(self) -> list[Path]:
        """Remove the files of this host's processes that are gone (a ``kill -9`` leaves one)."""
        gone = []
        suffix = re.compile(rf"-{re.escape(_safe(self.hostname))}-(\d+)\.json$")
        for p in self.folder.glob("*.json"):
            m = suffix.search(p.name)
            if m and int(m.group(1)) != self.pid and not pid_alive(int(m.group(1))):
                try:
                    p.unlink()
                    gone.append(p)
                except FileNotFoundError:
                    pass
        return gone


class Pusher:
    """Pushes the registry to a Pushgateway group (``PUT``: the group holds exactly the last
    push) and deletes the group at close when asked."""

    def __init__(self, registry: CollectorRegistry, gateway: str, grouping: dict[str, str], timeout: float = 10.0):
        self.registry = registry
        self.gateway = gateway
        self.job = grouping["job"]
        self.grouping = {k: v for k, v in grouping.items() if k != "job" and v}
        self.timeout = timeout

    def push(self) -> None:
        push_to_gateway(
            self.gateway, job=self.job, registry=self.registry, grouping_key=self.grouping, timeout=self.timeout
        )

    def delete(self) -> None:
        delete_from_gateway(self.gateway, job=self.job, grouping_key=self.grouping, timeout=self.timeout)


def write_textfile(registry: CollectorRegistry, path: str) -> None:
    """The metrics in the text format, written atomically (node_exporter never reads half a file)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(path, registry)
