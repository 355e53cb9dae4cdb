"""Turn an item into a storable document (plain Python).

Both backends store the same JSON-compatible document, so the rules are one:

=====================================  ==========================================
value                                  stored as
=====================================  ==========================================
str, bool, None, float                 itself (NaN/inf: the strings ``"NaN"``,
                                       ``"Infinity"``, ``"-Infinity"``)
int                                    itself; outside 64-bit range: its decimal string
datetime, date, time                   ISO 8601 string (``isoformat()``, offset kept)
timedelta                              total seconds (float)
Decimal                                its string (``str(d)``, no precision lost)
bytes, bytearray, memoryview           base64 string (standard alphabet, padded)
set, frozenset                         sorted list (sorted by the encoded values' JSON)
list, tuple                            list
Enum                                   its ``value``, encoded by these rules
UUID, pathlib paths                    ``str()``
mapping / nested item (itemadapter)    object; keys must be strings (int/float/bool
                                       keys become strings as in JSON)
anything else                          not encodable: the item goes to the dead letter
=====================================  ==========================================

A value nested deeper than :data:`MAX_DEPTH` levels (MongoDB's limit for a document)
or holding a reference to itself (a cycle) is not encodable either: dead letter.

Field names: a name starting with ``$`` or containing a NUL character cannot be
stored at any depth, and top-level names may not contain ``.``, be ``_id`` or
collide with the bookkeeping fields (``SCALE_STORE_FIELDS``); such an item goes to
the dead letter too, with the reason.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any

from itemadapter import ItemAdapter
from scrapy.utils.python import global_object_name

from scrapy_scale.errors import ScaleError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: deepest nesting of lists/objects stored (MongoDB refuses documents nested deeper than 100)
MAX_DEPTH = 100


class Unencodable(ScaleError, ValueError):
    """A value or field name that no rule can store."""


def encode_value(v: Any, path: str = "", _parents: tuple[int, ...] = ()) -> Any:
    """``v`` as stored; ``_parents`` holds the ids of the containers above it (cycles, depth)."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return v if INT64_MIN <= v <= INT64_MAX else str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, Enum):
        return encode_value(v.value, path)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, uuid.UUID | PurePath):
        return str(v)
    container = isinstance(v, set | frozenset | list | tuple | Mapping) or (
        not isinstance(v, type) and ItemAdapter.is_item(v)
    )
    if container:
        if id(v) in _parents:
            raise Unencodable(f"field {_short(path)}: holds a cycle (a reference to itself)")
        if len(_parents) >= MAX_DEPTH:
            raise Unencodable(f"field {_short(path)}: nested deeper than {MAX_DEPTH} levels")
        up = (*_parents, id(v))
    if isinstance(v, set | frozenset):
        enc = [encode_value(x, f"{path}[]", up) for x in v]
        return sorted(enc, key=lambda x: json.dumps(x, sort_keys=True))
    if isinstance(v, list | tuple):
        return [encode_value(x, f"{path}[{i}]", up) for i, x in enumerate(v)]
    if container:
        return encode_mapping(v if isinstance(v, Mapping) else ItemAdapter(v).asdict(), path, up)
    raise Unencodable(f"field {path or '(item)'}: no rule to store a {global_object_name(type(v))}")


def _short(path: str) -> str:
    return path if len(path) <= 80 else f"{path[:40]}...{path[-30:]}"


def encode_mapping(m: Mapping[Any, Any], path: str = "", _parents: tuple[int, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in m.items():
        if isinstance(k, bool | int | float) or k is None:
            k = json.dumps(k)
        if not isinstance(k, str):
            raise Unencodable(f"field {path or '(item)'}: key {k!r} is a {type(k).__name__}, not a string")
        name = f"{path}.{k}" if path else k
        if k.startswith("$") or "\x00" in k:
            raise Unencodable(f"field name {name!r} cannot be stored ($ prefix or NUL)")
        out[k] = encode_value(v, name, _parents)
    return out


def encode_item(fields: Mapping[str, Any], reserved: set[str]) -> dict[str, Any]:
    """The document of an item's fields (without the bookkeeping fields)."""
    for k in fields:
        if isinstance(k, str) and ("." in k or k == "_id" or k in reserved):
            raise Unencodable(
                f"field name {k!r} cannot be stored at the top level "
                "(contains '.', is '_id' or is a bookkeeping field; see SCALE_STORE_FIELDS)"
            )
    return encode_mapping(fields, "", (id(fields),))


def to_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
