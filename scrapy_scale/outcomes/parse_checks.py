"""Parse checks: did the callback produce what it should? (plain Python, no reactor)

- items missing a field named in ``SCALE_CRITICAL_FIELDS`` (absent, None, blank
  string, empty container: an empty value is *not* coverage);
- no items where items were expected, declared by (first that says something wins)
  ``Request.meta["scale_expect_items"]``, the callback's ``scale_expect_items``
  attribute (decorator :func:`expects_items`), or the spider's
  ``scale_expect_items`` (True/False, or a collection of callback names).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from itemadapter import ItemAdapter

from scrapy_scale import meta_keys

F = TypeVar("F", bound=Callable[..., Any])

ANY_ITEM = "*"


def expects_items(func: F) -> F:
    """Decorator for a spider callback that must yield at least one item."""
    func.scale_expect_items = True  # type: ignore[attr-defined]
    return func


def parse_critical_fields(value: Any) -> dict[str, tuple[str, ...]]:
    """``SCALE_CRITICAL_FIELDS``: a list (every item) or {item class name or "*": list}."""
    from scrapy_scale.config import as_json_value, as_list

    v = as_json_value(value) if isinstance(value, str) and value.strip()[:1] in "[{" else value
    if hasattr(v, "copy_to_dict"):
        v = v.copy_to_dict()
    if isinstance(v, Mapping):
        out: dict[str, tuple[str, ...]] = {}
        for k, fields in v.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"bad item class name {k!r}")
            out[k] = _fields(fields, k)
        return out
    fields = _fields(as_list()(v), ANY_ITEM)
    return {ANY_ITEM: fields} if fields else {}


def _fields(v: Any, where: str) -> tuple[str, ...]:
    from scrapy_scale.config import as_list

    items = as_list()(v)
    for f in items:
        if not isinstance(f, str) or not f:
            raise ValueError(f"{where}: field names must be non-empty strings, got {f!r}")
    return tuple(items)


def is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, Collection) and not isinstance(value, bytes | bytearray):
        return len(value) == 0
    return False


class ItemCheck:
    """Which critical fields does an item miss?"""

    def __init__(self, critical: Mapping[str, tuple[str, ...]]):
        self.critical = dict(critical)
        self.default = self.critical.get(ANY_ITEM, ())

    def __bool__(self) -> bool:
        return bool(self.critical)

    def missing(self, item: Any) -> tuple[str, ...]:
        fields = self.critical.get(type(item).__name__, self.default)
        if not fields:
            return ()
        try:
            adapter = ItemAdapter(item)
        except TypeError:  # not an item type itemadapter knows
            return ()
        return tuple(f for f in fields if is_empty(adapter.get(f)))


def expected_items(request_meta: Mapping[str, Any], callback: Any, spider: Any) -> bool:
    """Does this callback have to yield at least one item?"""
    v = request_meta.get(meta_keys.EXPECT_ITEMS)
    if v is not None:
        return bool(v)
    if callback is not None:
        v = getattr(callback, "scale_expect_items", None)
        if v is not None:
            return bool(v)
    sv = getattr(spider, "scale_expect_items", None)
    if sv is None or isinstance(sv, bool):
        return bool(sv)
    name = getattr(callback, "__name__", "parse")
    if isinstance(sv, str):
        return name == sv
    return name in sv
