"""Item validation before storage (plain Python, no reactor).

An item is valid when it has every critical field of its type (``SCALE_CRITICAL_FIELDS``,
read by the outcome package's parse check: absent, None, ``""``, ``[]``, ``{}`` and
whitespace count as missing) and matches its type's JSON Schema (``SCALE_QUALITY_SCHEMAS``,
optional). :meth:`Validator.check` returns what is wrong, as reasons a person reads, plus
the critical fields the item misses (the report's per-field missing rates).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from itemadapter import ItemAdapter

from scrapy_scale.outcomes.parse_checks import ANY_ITEM, ItemCheck, is_empty

#: at most this many schema errors are kept per item (a broken page can fail every property)
MAX_SCHEMA_ERRORS = 5


@dataclass
class Verdict:
    #: the critical fields this item type must have
    critical: tuple[str, ...] = ()
    #: which of them are missing
    missing: tuple[str, ...] = ()
    #: every reason, e.g. "missing critical field price", "schema: $.price: 'x' is not of type 'number'"
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reasons


class Validator:
    """Critical fields and JSON Schemas per item type name (``*`` = every other type)."""

    def __init__(self, critical: Mapping[str, tuple[str, ...]], schemas: Mapping[str, Mapping[str, Any]]):
        self.fields = ItemCheck(critical)
        self.critical = dict(critical)
        self._schemas: dict[str, Any] = {}
        if schemas:
            import jsonschema

            for name, schema in schemas.items():
                cls = jsonschema.validators.validator_for(schema)
                self._schemas[name] = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def __bool__(self) -> bool:
        """Is there anything to check? (Without critical fields or schemas, nothing to do.)"""
        return bool(self.fields) or bool(self._schemas)

    def check(self, item: Any) -> Verdict:
        type_name = type(item).__name__
        critical = self.critical.get(type_name, self.critical.get(ANY_ITEM, ()))
        v = Verdict(critical=tuple(critical))
        try:
            adapter = ItemAdapter(item)
        except TypeError:  # not an item: the store dead-letters it, with its own reason
            return v
        v.missing = tuple(f for f in critical if is_empty(adapter.get(f)))
        v.reasons += [f"missing critical field {f}" for f in v.missing]
        schema = self._schemas.get(type_name, self._schemas.get(ANY_ITEM))
        if schema is not None:
            doc = _jsonable(dict(adapter.items()))
            errors = sorted(schema.iter_errors(doc), key=lambda e: list(e.absolute_path))
            for e in errors[:MAX_SCHEMA_ERRORS]:
                v.reasons.append(f"schema: {e.json_path}: {e.message[:200]}")
            if len(errors) > MAX_SCHEMA_ERRORS:
                v.reasons.append(f"schema: {len(errors) - MAX_SCHEMA_ERRORS} more error(s)")
        return v


def _jsonable(value: Any) -> Any:
    """The item as JSON would carry it (tuples as lists, other objects as their text), so a
    schema sees what the store will keep."""
    return json.loads(json.dumps(value, default=str))


def reason_kind(reason: str) -> str:
    """The stat suffix of a reason: ``missing critical field price`` -> ``missing/price``,
    ``schema: $.price: ...`` -> ``schema``."""
    if reason.startswith("missing critical field "):
        return "missing/" + reason[len("missing critical field ") :][:60]
    return reason.split(":", 1)[0].strip().replace(" ", "_")[:40] or "other"


def content_hash(item: Any, fields: Sequence[str]) -> str | None:
    """A hash of ``fields`` of the item (None when the item has none of them)."""
    try:
        adapter = ItemAdapter(item) if not isinstance(item, Mapping) else item
    except TypeError:
        return None
    values = [adapter.get(f) for f in fields]
    if all(v is None for v in values):
        return None
    text = json.dumps(values, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8", "backslashreplace")).hexdigest()
