"""Real Prometheus and Pushgateway servers for the metrics tests (Debian packages
``prometheus`` and ``prometheus-pushgateway``; scripts/install-system-packages.sh installs them).

Each test starts its own server on a free loopback port with its own config and storage
folders; nothing depends on the packaged service (which may or may not be running on
the default port).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.hang import hang_guard
from tests.support.services import LOOPBACK, Process, free_port
from tests.support.system_tools import need


def http_get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode("utf-8"))


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + hang_guard(timeout)
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as e:  # noqa: BLE001 - not yet
            last = e
        time.sleep(interval)
    pytest.fail(f"{what}: not within {timeout:.0f}s (last: {last!r})")


class Prometheus:
    """A Prometheus server scraping every target in ``sd_folder/*.json`` each second."""

    def __init__(self, workdir: Path, sd_folder: Path, scrape_interval: str = "1s"):
        exe = need("prometheus")
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        sd_folder.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {scrape_interval}\n"
            f"  scrape_timeout: {scrape_interval}\n"
            "scrape_configs:\n"
            "  - job_name: scrapy\n"
            "    honor_labels: true\n"
            "    file_sd_configs:\n"
            f"      - files: ['{sd_folder}/*.json']\n"
            "        refresh_interval: 1s\n"
        )
        argv = [
            exe,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--log.level=warn",
        ]
        self.process = Process("prometheus", argv, self.port, workdir, self._ready)

    def _ready(self) -> bool:
        return http_get(self.url + "/-/ready").strip().startswith("Prometheus")

    def __enter__(self) -> Prometheus:
        self.process.start(timeout=60)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.process.stop()

    def query(self, promql: str) -> list[dict[str, Any]]:
        body = json.loads(http_get(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value(self, promql: str) -> float | None:
        """The one sample of ``promql`` (None when there is none)."""
        res = self.query(promql)
        if not res:
            return None
        assert len(res) == 1, res
        return float(res[0]["value"][1])

    def by(self, promql: str, label: str) -> dict[str, float]:
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(promql)}

    def targets(self) -> list[dict[str, Any]]:
        body = json.loads(http_get(self.url + "/api/v1/targets"))
        return list(body["data"]["activeTargets"])


class Pushgateway:
    def __init__(self, workdir: Path):
        exe = need("prometheus-pushgateway")
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        # memory only: Debian's build persists to /var/lib/prometheus/pushgateway.data by
        # default, so every test's Pushgateway would start with the groups of earlier runs
        argv = [exe, f"--web.listen-address={LOOPBACK}:{self.port}", "--log.level=warn", "--persistence.file="]
        self.process = Process(
            "pushgateway", argv, self.port, workdir, lambda: http_get(self.url + "/-/ready") is not None
        )

    def __enter__(self) -> Pushgateway:
        self.process.start(timeout=60)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.process.stop()

    def groups(self) -> list[dict[str, str]]:
        """The grouping labels of every group the Pushgateway holds."""
        body = json.loads(http_get(self.url + "/api/v1/metrics"))
        return [dict(g["labels"]) for g in body["data"]]


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = need("promtool")
    return subprocess.run([exe, *args], input=stdin, capture_output=True, text=True, timeout=hang_guard(120), cwd=cwd)


def sd_targets(folder: Path) -> list[str]:
    """Every target address in the file_sd files of ``folder``."""
    out = []
    for p in sorted(folder.glob("*.json")):
        try:
            for group in json.loads(p.read_text()):
                out.extend(group["targets"])
        except (ValueError, KeyError):
            continue  # being replaced
    return out
