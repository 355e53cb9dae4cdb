"""SCALE_* settings of the item store (scrapy_scale.storage)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import scrapy_scale.config.core_settings  # noqa: F401 - SCALE_STATE_DIR and SCALE_JOB, read here too
from scrapy_scale.config import as_bool, as_dict, as_float, as_int, as_list, as_str, as_url, declare
from scrapy_scale.storage.layout import META_FIELDS, SCHEMES, sqlite_path

#: the SCALE_ITEM_KEY entry that keys every item type not listed by name
ANY_TYPE = "*"


def as_item_key(v: Any) -> dict[str, list[str]]:
    """``{"ProductItem": ["sku"], "*": ["url"]}``: item type name -> key fields.

    A field or list of fields alone (``sku``, ``sku,color``, ``["sku"]``) keys every item
    type (``{"*": [...]}``); a type's fields take what Scrapy's ``getlist`` takes (a list,
    or a comma-separated string)."""
    if isinstance(v, str) and v.strip()[:1] == "{" or isinstance(v, Mapping) or hasattr(v, "copy_to_dict"):
        d = as_dict(v)
    elif isinstance(v, str) and not v.strip():
        return {}  # `-s SCALE_ITEM_KEY=`: no declared key, as Scrapy's getlist reads "" as []
    else:
        d = {ANY_TYPE: v}
    out: dict[str, list[str]] = {}
    for type_name, fields in d.items():
        try:
            names = as_list()(fields)
        except ValueError:
            raise ValueError(f"{type_name!r}: expected a field name or a list of field names") from None
        if not names:
            raise ValueError(f"{type_name!r}: expected a non-empty list of field names")
        if not all(isinstance(f, str) and f for f in names):
            raise ValueError(f"{type_name!r}: field names must be non-empty strings")
        out[str(type_name)] = names
    return out


def as_meta_fields(v: Any) -> dict[str, str]:
    d = as_dict(v)
    unknown = sorted(set(d) - set(META_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; known: {sorted(META_FIELDS)}")
    out = dict(META_FIELDS)
    for k, name in d.items():
        if not isinstance(name, str) or not name or name == "_id" or "." in name or name.startswith("$"):
            raise ValueError(f"{k!r}: {name!r} is not a usable field name")
        out[k] = name
    if len(set(out.values())) != len(out):
        raise ValueError("two bookkeeping fields share one name")
    return out


def as_collection(v: Any) -> str:
    name = as_str(v)
    if not name or not all(c.isalnum() or c == "_" for c in name):
        raise ValueError("use letters, digits and _ only")
    return name


def as_store_url(v: Any) -> str:
    """A store URL; an ``sqlite:`` one must name a file (checked here, at startup)."""
    url: str = as_url(*SCHEMES)(v)
    if url.startswith("sqlite:"):
        sqlite_path(url)  # ValueError "no file in ..." when it names none
    return url


URL = declare(
    "SCALE_STORE_URL",
    None,
    as_store_url,
    "Item store: `sqlite:///path` or `mongodb://host:port/db`. Default: `items.sqlite` in `SCALE_STATE_DIR` (or `JOBDIR`).",
    "storage",
)
COLLECTION = declare(
    "SCALE_STORE_COLLECTION",
    "items",
    as_collection,
    "MongoDB collection (SQLite table) that holds the items.",
    "storage",
)
DEAD_LETTER = declare(
    "SCALE_STORE_DEAD_LETTER",
    None,
    as_collection,
    "Collection (table) for items that can never be stored, with the reason. Default: `<collection>_dead_letter`.",
    "storage",
)
ITEM_KEY = declare(
    "SCALE_ITEM_KEY",
    {},
    as_item_key,
    'Key fields per item type, e.g. `{"ProductItem": ["sku"], "*": ["url"]}`, or the fields '
    'alone for every item type (`sku`, `sku,color` or `["sku"]`, as on the command line: `-s '
    "SCALE_ITEM_KEY=sku`); `@page` = the page URL. Unlisted types: fingerprint of the page's "
    "canonical URL (+ `-n` for its n-th item).",
    "storage",
)
BATCH_SIZE = declare(
    "SCALE_STORE_BATCH_SIZE",
    100,
    as_int(1, 100_000),
    "Items written per batch (one transaction / one unordered bulk_write).",
    "storage",
)
MAX_LATENCY = declare(
    "SCALE_STORE_MAX_LATENCY",
    0.2,
    as_float(0, 60),
    "Seconds an item may wait for its batch to fill before the batch is written anyway.",
    "storage",
)
MAX_PENDING = declare(
    "SCALE_STORE_MAX_PENDING",
    2000,
    as_int(1),
    "Items waiting to be stored above which the crawl pauses (it resumes at half).",
    "storage",
)
RETRY_MAX_DELAY = declare(
    "SCALE_STORE_RETRY_MAX_DELAY",
    10.0,
    as_float(0.01, 3600),
    "Cap in seconds of the backoff between attempts to write a batch while the store is unavailable.",
    "storage",
)
MAX_ITEM_BYTES = declare(
    "SCALE_STORE_MAX_ITEM_BYTES",
    15 * 1024 * 1024,
    as_int(1024, 16 * 1024 * 1024),
    "Largest item (encoded JSON bytes) stored; a larger one goes to the dead letter.",
    "storage",
)
DROP_DUPLICATES = declare(
    "SCALE_STORE_DROP_DUPLICATES",
    False,
    as_bool,
    "Drop an item whose key was already written in this run (always counted in `scale/store/duplicates_in_run`).",
    "storage",
)
FIELDS = declare(
    "SCALE_STORE_FIELDS",
    {},
    as_meta_fields,
    'Names of the bookkeeping fields, e.g. `{"first_seen": "seen_at"}`; defaults `_first_seen`, `_last_seen`, `_run_id`, `_job`, `_source_url`, `_item_type`.',
    "storage",
)
