"""Settings shared by every component: the job and where state lives."""

from __future__ import annotations

from scrapy_scale.config import as_bool, as_str, declare

JOB = declare(
    "SCALE_JOB",
    None,
    as_str,
    "Name of the job whose state (frontier, items, history) this crawl uses. Default: the spider's name.",
    "core",
)
STATE_DIR = declare(
    "SCALE_STATE_DIR",
    ".scale",
    as_str,
    "Folder for the embedded SQLite files when no URL names one (`JOBDIR` wins when set).",
    "core",
)
ENABLED = declare(
    "SCALE_ENABLED",
    True,
    as_bool,
    "Master switch of the add-on: False leaves the crawl exactly as plain Scrapy would run it.",
    "core",
)
