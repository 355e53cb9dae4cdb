"""Stable item keys (plain Python, no Scrapy engine needed).

A key must be the same whenever the same item is produced again: on a retry, after
a resume, on another worker. Two schemes:

* **page key** (default): ``sha1(canonical URL of the response)`` as 40 hex digits;
  the n-th item (n >= 1, counting from 0 in the order the callback yielded them)
  of the same response gets ``<sha1>-<n>``. Stable as long as the page yields its
  items in the same order; declare key fields for item types where that is not so.
* **declared key** (``SCALE_ITEM_KEY``): ``sha1(JSON [type name, [field values]])``.
  The item type name is part of the key, so two types never overwrite each other.
  The pseudo-field ``@page`` stands for the canonical page URL (e.g.
  ``["@page", "review_id"]``: unique within a page). Rules are looked up by the
  item's class name, then by ``"*"``.

A missing, ``None`` or empty key field makes the key invalid (:class:`InvalidKey`);
the pipeline sends such an item to the dead letter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from w3lib.url import canonicalize_url

from scrapy_scale.errors import ScaleError

PAGE = "@page"


class InvalidKey(ScaleError, ValueError):
    """The item's key cannot be computed (missing or empty key field)."""


def canonical_url(url: str) -> str:
    """Scrapy's canonical form: sorted query arguments, normalised escapes, no fragment."""
    return canonicalize_url(url, keep_fragments=False)


def url_fingerprint(url: str) -> str:
    return hashlib.sha1(canonical_url(url).encode("utf-8")).hexdigest()


def page_key(url: str, index: int = 0) -> str:
    fp = url_fingerprint(url)
    return fp if index == 0 else f"{fp}-{index}"


def _key_value(v: Any, field: str) -> Any:
    if v is None or v == "" or v == [] or v == {}:
        raise InvalidKey(f"key field {field!r} is empty")
    if isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple):
        return [_key_value(x, field) for x in v]
    raise InvalidKey(f"key field {field!r} has a {type(v).__name__}, expected a string or number")


def declared_key(type_name: str, fields: Sequence[str], item: Mapping[str, Any], page_url: str | None) -> str:
    values: list[Any] = []
    for f in fields:
        if f == PAGE:
            if not page_url:
                raise InvalidKey("key field '@page' needs a page, but the item came from no response")
            values.append(canonical_url(page_url))
        elif f not in item:
            raise InvalidKey(f"key field {f!r} is missing")
        else:
            values.append(_key_value(item[f], f))
    material = json.dumps([type_name, values], ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha1(material.encode("utf-8")).hexdigest()


class KeyRules:
    """``SCALE_ITEM_KEY`` resolved: which fields (if any) key an item type."""

    def __init__(self, rules: Mapping[str, Sequence[str]] | None = None):
        self.rules = {k: list(v) for k, v in (rules or {}).items()}

    def fields_for(self, type_name: str) -> list[str] | None:
        return self.rules.get(type_name) or self.rules.get("*")

    def key(self, type_name: str, item: Mapping[str, Any], page_url: str | None, index: int) -> str:
        """The item's key; ``index`` is its position among the items of its response."""
        fields = self.fields_for(type_name)
        if fields:
            return declared_key(type_name, fields, item, page_url)
        if not page_url:
            raise InvalidKey(f"no key: {type_name} came from no response; declare its key fields in SCALE_ITEM_KEY")
        return page_key(page_url, index)
