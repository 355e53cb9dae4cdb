"""SCALE_METRICS_* and SCALE_PROGRESS_* settings (declared in the registry, see scrapy_scale.config).

The metrics extension is on only when one export mode is set (``SCALE_METRICS_PORT``,
``SCALE_METRICS_PUSHGATEWAY`` or ``SCALE_METRICS_TEXTFILE``); the default crawl exports nothing.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from scrapy_scale.config import (
    as_bool,
    as_float,
    as_int,
    as_str,
    core_settings,  # noqa: F401 - declares SCALE_STATE_DIR, read for the file_sd default
    declare,
)

COMPONENT = "monitor"


def as_port_range(v: Any) -> tuple[int, int] | None:
    """A port (``9410``), a range (``"9410-9430"``), or ``0`` (any free port); None: off.

    Returns (first, last); (0, 0) means "any free port".
    """
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        raise ValueError("expected a port, a range such as 9410-9430, or 0")
    if isinstance(v, int):
        lo = hi = v
    else:
        text = as_str(v).strip()
        m = re.fullmatch(r"(\d{1,5})(?:\s*-\s*(\d{1,5}))?", text)
        if not m:
            raise ValueError("expected a port, a range such as 9410-9430, or 0")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
    if not (0 <= lo <= 65535 and 0 <= hi <= 65535):
        raise ValueError("ports are 0 to 65535")
    if hi < lo:
        raise ValueError("the range's first port is above its last")
    if lo == 0 and hi != 0:
        raise ValueError("0 (any free port) cannot start a range")
    return (lo, hi)


def as_http_url(v: Any) -> str | None:
    if v is None or v == "":
        return None
    url = as_str(v).strip()
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http://host:port of a Pushgateway")
    return parts.geturl()


def as_optional_path(v: Any) -> str | None:
    if v is None or v == "":
        return None
    return as_str(v)


PORT = declare(
    "SCALE_METRICS_PORT",
    None,
    as_port_range,
    "Serve Prometheus metrics at `/metrics` on this port, the first free one of a range such as "
    "`9410-9430`, or any free port (`0`); the address goes to the file_sd file. Unset: no endpoint.",
    COMPONENT,
)
HOST = declare(
    "SCALE_METRICS_HOST",
    "127.0.0.1",
    as_str,
    "Address the `/metrics` endpoint listens on (loopback unless you say otherwise).",
    COMPONENT,
)
FILE_SD = declare(
    "SCALE_METRICS_FILE_SD",
    None,
    as_optional_path,
    "Folder of Prometheus `file_sd` target files: each crawl with an endpoint writes its own "
    "`<job>-<host>-<pid>.json` there and removes it at close. Default: `prometheus/` under `SCALE_STATE_DIR`.",
    COMPONENT,
)
PUSHGATEWAY = declare(
    "SCALE_METRICS_PUSHGATEWAY",
    None,
    as_http_url,
    "Push the metrics to this Pushgateway (`http://host:9091`) every `SCALE_METRICS_INTERVAL` and at close, "
    "grouped by job, spider, worker and scrapyd's `_job` argument.",
    COMPONENT,
)
PUSH_DELETE = declare(
    "SCALE_METRICS_PUSH_DELETE",
    True,
    as_bool,
    "Delete the crawl's Pushgateway group at close (after the final push), so finished runs leave no series.",
    COMPONENT,
)
TEXTFILE = declare(
    "SCALE_METRICS_TEXTFILE",
    None,
    as_optional_path,
    "Write the metrics to this `.prom` file (atomically) every `SCALE_METRICS_INTERVAL` and at close, "
    "for node_exporter's textfile collector.",
    COMPONENT,
)
INTERVAL = declare(
    "SCALE_METRICS_INTERVAL",
    10.0,
    as_float(0.5, 3600.0),
    "Seconds between reads of the queue, slots and pools into the gauges, and between pushes / textfile writes.",
    COMPONENT,
)
TOP_DOMAINS = declare(
    "SCALE_METRICS_TOP_DOMAINS",
    20,
    as_int(0, 1000),
    "Domains with their own series in per-domain metrics (the busiest ones); every other domain is `other`.",
    COMPONENT,
)
PROGRESS_INTERVAL = declare(
    "SCALE_PROGRESS_INTERVAL",
    60.0,
    as_float(0.0, 86_400.0),
    "Seconds between progress lines (done, pending, failed, pages/min, items/min, ETA); 0 = none.",
    COMPONENT,
)
WATCH_INTERVAL = declare(
    "SCALE_WATCH_INTERVAL",
    5.0,
    as_float(0.0, 3600.0),
    "Seconds between the snapshots each worker publishes next to its frontier for `scrapy scale watch` "
    "and `status`; 0 = none.",
    COMPONENT,
)
