"""SCALE_* settings of the data-quality layer (scrapy_scale.quality)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import scrapy_scale.config.core_settings  # noqa: F401 - SCALE_STATE_DIR and SCALE_JOB, read here too
from scrapy_scale.config import as_bool, as_dict, as_float, as_int, as_list, as_str, declare

COMPONENT = "quality"


def as_schemas(v: Any) -> dict[str, dict[str, Any]]:
    """``{"ProductItem": {JSON Schema} or "path/to/schema.json", "*": ...}``; each schema is
    checked (``jsonschema``'s ``check_schema``) at startup."""
    d = as_dict(v)
    out: dict[str, dict[str, Any]] = {}
    for name, schema in d.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"bad item type name {name!r}")
        if isinstance(schema, str):
            try:
                with open(schema, encoding="utf-8") as f:
                    schema = json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                raise ValueError(f"{name!r}: cannot read the schema file {schema!r}: {e}") from None
        if hasattr(schema, "copy_to_dict"):
            schema = schema.copy_to_dict()
        if not isinstance(schema, Mapping):
            raise ValueError(f"{name!r}: a JSON Schema is a dict (or the path of a .json file)")
        try:
            import jsonschema
        except ImportError:
            raise ValueError("JSON Schemas need the jsonschema library: pip install 'scrapy-scale[all]'") from None
        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as e:
            raise ValueError(f"{name!r}: not a valid JSON Schema: {e.message}") from None
        out[name] = dict(schema)
    return out


def as_expectations(v: Any) -> dict[str, float]:
    """``{"parse_item": 1}``: callback name -> items per completed request."""
    out: dict[str, float] = {}
    for name, n in as_dict(v).items():
        if isinstance(n, bool) or not isinstance(n, int | float) or n < 0:
            raise ValueError(f"{name!r}: expected a number of items per request >= 0, got {n!r}")
        out[str(name)] = float(n)
    return out


def as_classes(v: Any) -> list[str]:
    """Failure class names (``parse_failed``, ``blocked``...)."""
    from scrapy_scale.outcomes.model import FailureClass

    return [FailureClass.parse(str(c)).value for c in as_list(as_str)(v)]


def as_rate(v: Any) -> float:
    return as_float(0, 1)(v)


SCHEMAS = declare(
    "SCALE_QUALITY_SCHEMAS",
    {},
    as_schemas,
    "JSON Schema per item type name (`*` = any type): a dict, or the path of a `.json` file; "
    "an item that fails its schema is quarantined. Needs `jsonschema` (the `all` extra). See "
    "docs/quality.md.",
    COMPONENT,
)
QUARANTINE = declare(
    "SCALE_QUALITY_QUARANTINE",
    None,
    as_str,
    "Collection (SQLite table) of the quarantined items, in the item store; default "
    "`<SCALE_STORE_COLLECTION>_quarantine`.",
    COMPONENT,
)
CONTENT_FIELDS = declare(
    "SCALE_QUALITY_CONTENT_FIELDS",
    [],
    as_list(as_str),
    "Fields hashed to find duplicate content (in the run and in the store), e.g. `title,price`. Off when empty.",
    COMPONENT,
)
HISTORY = declare(
    "SCALE_QUALITY_HISTORY",
    None,
    as_str,
    "Collection (SQLite table) of the per-run quality figures, in the item store; default "
    "`<SCALE_STORE_COLLECTION>_quality_runs`.",
    COMPONENT,
)
HISTORY_RUNS = declare(
    "SCALE_QUALITY_HISTORY_RUNS",
    10,
    as_int(2, 1000),
    "Runs of a job kept in the history (the report compares a run with the earlier ones).",
    COMPONENT,
)
DIR = declare(
    "SCALE_QUALITY_DIR",
    None,
    as_str,
    "Folder of the reports and raw snapshots; default `quality/<job>` under `JOBDIR` or `SCALE_STATE_DIR`.",
    COMPONENT,
)
REPORT = declare(
    "SCALE_QUALITY_REPORT",
    True,
    as_bool,
    "Count the run's figures and write the consistency report (JSON and HTML) when a crawl ends.",
    COMPONENT,
)
EXPECT = declare(
    "SCALE_QUALITY_EXPECT",
    {},
    as_expectations,
    'Items expected per completed request of a callback, e.g. `{"parse_item": 1}`; undeclared callbacks '
    "are compared with the ratio of earlier runs.",
    COMPONENT,
)
RATIO_TOLERANCE = declare(
    "SCALE_QUALITY_RATIO_TOLERANCE",
    0.05,
    as_rate,
    "Relative shortfall of stored items per completed request (against the expectation or earlier runs) "
    "that fails the check.",
    COMPONENT,
)
MAX_RISE = declare(
    "SCALE_QUALITY_MAX_RISE",
    0.05,
    as_rate,
    "Rise of a field's missing rate, of a callback's empty-parse share or of a failure class's share, "
    "against earlier runs, that fails the check (absolute, 0.05 = 5 points).",
    COMPONENT,
)
MAX_INVALID = declare(
    "SCALE_QUALITY_MAX_INVALID_RATE",
    0.05,
    as_rate,
    "Share of items quarantined by validation above which the run fails its check.",
    COMPONENT,
)
MAX_EMPTY = declare(
    "SCALE_QUALITY_MAX_EMPTY_RATE",
    0.1,
    as_rate,
    "Share of a callback's completed requests that yielded no item above which a run with no earlier "
    "run to compare with fails (callbacks that stored items, or declared in SCALE_QUALITY_EXPECT).",
    COMPONENT,
)
MAX_PARSE_FAILED = declare(
    "SCALE_QUALITY_MAX_PARSE_FAILED_RATE",
    0.05,
    as_rate,
    "Share of requests ending parse_failed above which a run with no earlier run to compare with fails.",
    COMPONENT,
)
MAX_DUPLICATES = declare(
    "SCALE_QUALITY_MAX_DUPLICATE_RATE",
    0.01,
    as_rate,
    "Share of duplicate items (in the run, or rows in the store) above which the run fails its check.",
    COMPONENT,
)
DUPLICATE_KEY = declare(
    "SCALE_QUALITY_DUPLICATE_KEY",
    [],
    as_list(as_str),
    "Fields that identify a product in the store (e.g. `sku`): rows of the job sharing them are counted "
    "as duplicates at the end of the run. Off when empty.",
    COMPONENT,
)
SAMPLE_SIZE = declare(
    "SCALE_QUALITY_SAMPLE_SIZE",
    20,
    as_int(0, 100_000),
    "Stored rows of the run drawn (seeded, reproducible) for a person to review.",
    COMPONENT,
)
EXIT_CODE = declare(
    "SCALE_QUALITY_EXIT_CODE",
    0,
    as_int(0, 255),
    "Exit status of a crawl whose quality report fails a check (and of `scrapy scale report`); `0` = leave it alone.",
    COMPONENT,
)
FINISH_REASON = declare(
    "SCALE_QUALITY_FINISH_REASON",
    None,
    as_str,
    "Finish reason (the `finish_reason` stat) of a crawl whose report fails a check, e.g. `quality_failed`.",
    COMPONENT,
)
BATCH_SECONDS = declare(
    "SCALE_QUALITY_BATCH_SECONDS",
    60.0,
    as_float(0),
    "Seconds between the checks run on the figures so far during a crawl (stats and a log line "
    "when one fails); `0` = only at the end.",
    COMPONENT,
)
JUDGE_WAIT = declare(
    "SCALE_QUALITY_JUDGE_WAIT",
    60.0,
    as_float(0, 3600),
    "Seconds a process that finishes a run waits for the final figures of the run's other processes "
    "(workers) before it judges the whole run; every worker judges the same figures.",
    COMPONENT,
)
SNAPSHOT_CLASSES = declare(
    "SCALE_QUALITY_SNAPSHOT_CLASSES",
    ["parse_failed"],
    as_classes,
    "Final outcome classes whose responses are kept as raw snapshots (compressed) for `scrapy scale "
    "replay`; `[]` = none.",
    COMPONENT,
)
SNAPSHOT_SAMPLE = declare(
    "SCALE_QUALITY_SNAPSHOT_SAMPLE",
    0.0,
    as_rate,
    "Share of all other responses kept as snapshots too (seeded by the URL).",
    COMPONENT,
)
SNAPSHOT_MAX_COUNT = declare(
    "SCALE_QUALITY_SNAPSHOT_MAX_COUNT",
    1000,
    as_int(0),
    "Most snapshots kept per job; the oldest are dropped first (counted).",
    COMPONENT,
)
SNAPSHOT_MAX_BYTES = declare(
    "SCALE_QUALITY_SNAPSHOT_MAX_BYTES",
    100 * 2**20,
    as_int(0),
    "Most bytes (compressed) of snapshots kept per job; the oldest are dropped first (counted).",
    COMPONENT,
)


def check_all(settings: Any) -> None:
    """Parse every setting of this package (a bad value fails at startup, with its name)."""
    from scrapy_scale import config

    for value in list(globals().values()):
        if isinstance(value, config.Setting):
            value.get(settings)
