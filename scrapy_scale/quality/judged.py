"""The settings that judged a page, recorded with its snapshot and read back by replay
(plain Python, no reactor).

A crawl's verdict on a page (``parse_failed``, an item quarantined) comes from its critical
fields, schemas, item keys and item size bound. A replay that judged the page with other
settings (say, the command run without the crawl's ``-s SCALE_CRITICAL_FIELDS=...``) could
store the very items the crawl refused. So every snapshot carries :func:`record` of the
settings of the crawl that kept it, and the replay uses them unless the user gives a setting
on the command line (``-s``), which wins and is said.

A record is read back from a file: it is untrusted. :func:`read` accepts only the names of
:data:`JUDGING`, each value parsed by its setting's own parser, and schemas only as JSON
objects (never a path to open); anything else raises :class:`ValueError` saying why, and the
replay falls back to the current settings for that snapshot, with one warning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scrapy.settings import SETTINGS_PRIORITIES

from scrapy_scale import config

#: the settings that decide whether a page's items are valid and how they are keyed
JUDGING = ("SCALE_CRITICAL_FIELDS", "SCALE_QUALITY_SCHEMAS", "SCALE_ITEM_KEY", "SCALE_STORE_MAX_ITEM_BYTES")
#: the snapshot's field holding the record
FIELD = "judged_with"
#: a record larger than this (JSON characters) is refused
MAX_CHARS = 1_000_000


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def record(settings: Any) -> dict[str, Any]:
    """The parsed values of the judging settings, as JSON carries them."""
    config.load_declarations()
    return {name: _jsonable(config.get(settings, name)) for name in JUDGING}


def read(raw: Any) -> dict[str, Any]:
    """The record's values (JSON-able, each accepted by its setting's parser); ValueError
    says what is wrong with it. Names the record does not hold are not judged by it."""
    config.load_declarations()
    if not isinstance(raw, Mapping):
        raise ValueError(f"not a JSON object but {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in JUDGING)
    if unknown:
        raise ValueError(f"names settings it may not set: {', '.join(unknown)[:200]}")
    try:
        size = len(json.dumps(raw, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"not plain JSON ({e})") from None
    if size > MAX_CHARS:
        raise ValueError(f"{size} characters, more than {MAX_CHARS}")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if value is None:
            raise ValueError(f"{name}: null")
        if name == "SCALE_QUALITY_SCHEMAS" and (
            not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values())
        ):
            raise ValueError(f"{name}: not a JSON object of JSON Schemas")
        try:
            out[name] = _jsonable(config.REGISTRY[name].parse(value))
        except (TypeError, ValueError, RecursionError) as e:
            raise ValueError(f"{name}: {str(e)[:200]}") from None
    return out


def overridden(settings: Any) -> set[str]:
    """The judging settings the user gave on the command line (``-s``): they win."""
    cmdline = SETTINGS_PRIORITIES["cmdline"]
    getpriority = getattr(settings, "getpriority", None)
    if getpriority is None:
        return set()
    return {name for name in JUDGING if (getpriority(name) or 0) >= cmdline}


def describe(values: Mapping[str, Any]) -> str:
    """``SCALE_CRITICAL_FIELDS={"*": ["sku", "price"]}, ...`` (schemas shortened)."""
    parts = []
    for name in JUDGING:
        if name not in values:
            continue
        text = json.dumps(values[name], sort_keys=True)
        parts.append(f"{name}={text if len(text) <= 120 else text[:117] + '...'}")
    return ", ".join(parts)
