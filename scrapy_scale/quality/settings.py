"""SCALE_* settings of the data-quality layer (scrapy_scale.quality)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import scrapy_scale.settings_core  # noqa: F401 - SCALE_STATE_DIR and SCALE_JOB, read here too
from scrapy_scale.config import as_dict, as_float, as_list, as_str, declare

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


def as_rate(v: Any) -> float:
    return as_float(0, 1)(v)


SCHEMAS = declare(
    "SCALE_QUALITY_SCHEMAS", {}, as_schemas,
    "JSON Schema per item type name (`*` = any type): a dict, or the path of a `.json` file; an item "
    "that fails its schema is quarantined. Needs `jsonschema` (the `all` extra).", COMPONENT)
QUARANTINE = declare(
    "SCALE_QUALITY_QUARANTINE", None, as_str,
    "Collection (SQLite table) of the quarantined items, in the item store; default "
    "`<SCALE_STORE_COLLECTION>_quarantine`.", COMPONENT)
CONTENT_FIELDS = declare(
    "SCALE_QUALITY_CONTENT_FIELDS", [], as_list(as_str),
    "Fields hashed to find duplicate content (in the run and in the store), e.g. `title,price`. "
    "Off when empty.", COMPONENT)
