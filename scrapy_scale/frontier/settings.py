"""SCALE_FRONTIER_* settings (declared in the registry, see scrapy_scale.config)."""

from __future__ import annotations

import re
from typing import Any

from scrapy_scale.config import (
    as_bool,
    as_float,
    as_int,
    as_list,
    as_str,
    as_url,
    core_settings,  # noqa: F401 - declares SCALE_JOB / SCALE_STATE_DIR (used alone, without the add-on)
    declare,
)

COMPONENT = "frontier"

URL = declare(
    "SCALE_FRONTIER_URL",
    None,
    as_url("sqlite", "redis", "rediss"),
    "Where the persisted frontier lives: `sqlite:///path.db` (one machine) or "
    "`redis://host:6379/0` (many workers). Default: `frontier.db` under `JOBDIR`, else under `SCALE_STATE_DIR`.",
    COMPONENT,
)
BATCH = declare(
    "SCALE_FRONTIER_BATCH",
    64,
    as_int(1, 10_000),
    "Requests leased per round trip; the worker buffers at most this many leased requests.",
    COMPONENT,
)
KNOWN = declare(
    "SCALE_FRONTIER_KNOWN",
    100_000,
    as_int(0, 10_000_000),
    "Fingerprints a worker remembers as already in the frontier (answered by the store, or leased): "
    "a plain request for one is counted as a duplicate without a store call. About 130 bytes each (13 MB at the default); "
    "0: every request asks the store.",
    COMPONENT,
)
LEASE = declare(
    "SCALE_FRONTIER_LEASE",
    60.0,
    as_float(2.0, 86_400.0),
    "Seconds a lease lasts unless renewed; a dead worker's requests return to pending after it.",
    COMPONENT,
)
PARTITIONS = declare(
    "SCALE_FRONTIER_PARTITIONS",
    None,
    as_int(1, 1024),
    "Partitions of a job's Redis frontier, split by site, each its own Cluster hash tag so one "
    "job spreads over a Redis Cluster's shards. Default: 1 on a single Redis node, 4 per primary "
    "on a Cluster. Fixed for a job's life (stored at its first start; a worker with another count "
    "refuses to start). Not used by the SQLite frontier. See docs/distributed.md.",
    COMPONENT,
)
WAIT_FOR_SEEDS = declare(
    "SCALE_FRONTIER_WAIT_FOR_SEEDS",
    False,
    as_bool,
    "Keep workers open when the job is drained, waiting for new seeds (instead of closing).",
    COMPONENT,
)


def as_scheme(v: Any) -> str:
    scheme = as_str(v).strip().lower()
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise ValueError(f"{v!r} is not a URL scheme (such as https)")
    return scheme


def as_dotted(v: Any) -> str:
    name = as_str(v).strip()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
        raise ValueError(f"{v!r} is not a dotted path of a class or module")
    return name


SCHEMES = declare(
    "SCALE_FRONTIER_SCHEMES",
    ["http", "https"],
    as_list(as_scheme),
    "URL schemes a stored record or a feed seed may have; a record of another scheme is "
    "dead-lettered, a seed refused. See docs/frontier.md.",
    COMPONENT,
)
REQUEST_CLASSES = declare(
    "SCALE_FRONTIER_REQUEST_CLASSES",
    [],
    as_list(as_dotted),
    "Request subclasses a stored record may name (dotted paths of classes or modules), "
    "besides Scrapy's own and the spider's module; a record naming any other class is "
    "dead-lettered without importing it.",
    COMPONENT,
)


ERROR_DEADLINE = declare(
    "SCALE_FRONTIER_ERROR_DEADLINE",
    600.0,
    as_float(0.0, 7 * 86_400.0),
    "Seconds the frontier keeps retrying failing writes (disk full, I/O errors; with backoff "
    "and one log line per 30 s) before it stops the crawl with an error (exit status 1); `0` "
    "= retry forever.",
    COMPONENT,
)


def as_worker_id(v: Any) -> str:
    """A worker id: a non-empty string (an empty one would be shared by every such worker)."""
    worker = as_str(v)
    if not worker.strip():
        raise ValueError("empty; leave it unset for the default hostname/N, or give each worker its own id")
    return worker


WORKER = declare(
    "SCALE_FRONTIER_WORKER",
    None,
    as_worker_id,
    "This worker's id in lease records, unique among live workers (default: the lowest slot "
    "on this host not held by a live process).",
    COMPONENT,
)


def frontier_url(settings: Any) -> str:
    """SCALE_FRONTIER_URL, or the default SQLite file under JOBDIR / SCALE_STATE_DIR."""
    url = URL.get(settings)
    if url:
        return str(url)
    return core_settings.state_file_url(settings, "frontier.db")
