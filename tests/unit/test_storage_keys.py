"""Item keys and the encoding rules: plain Python, no reactor, no store."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import uuid
from decimal import Decimal
from enum import Enum

import pytest
import scrapy
from scrapy.settings import Settings

from scrapy_scale import config
from scrapy_scale.storage import keys
from scrapy_scale.storage.encode import Unencodable, encode_item, encode_value
from scrapy_scale.storage.settings import as_item_key, as_meta_fields

pytestmark = pytest.mark.pure


def test_page_key_is_the_canonical_url_fingerprint():
    a = keys.page_key("http://shop.test/p?b=2&a=1#reviews")
    b = keys.page_key("http://shop.test/p?a=1&b=2")
    assert a == b and len(a) == 40
    assert keys.page_key("http://shop.test/p?a=1&b=3") != a


def test_several_items_of_one_page_are_numbered_from_the_second():
    rules = keys.KeyRules()
    url = "http://shop.test/list"
    got = [rules.key("dict", {}, url, i) for i in range(3)]
    fp = keys.url_fingerprint(url)
    assert got == [fp, f"{fp}-1", f"{fp}-2"]


def test_declared_key_fields_per_type_with_wildcard():
    rules = keys.KeyRules({"ProductItem": ["sku"], "*": ["url"]})
    p1 = rules.key("ProductItem", {"sku": "A1", "price": 1}, "http://x.test/1", 0)
    p2 = rules.key("ProductItem", {"sku": "A1", "price": 2}, "http://x.test/other", 5)
    assert p1 == p2, "same declared fields, same key, whatever the page or position"
    assert rules.key("ProductItem", {"sku": "A2"}, None, 0) != p1
    # the type is part of the key: another type with the same values does not collide
    r1 = rules.key("Review", {"url": "http://x.test/r"}, None, 0)
    r2 = rules.key("Other", {"url": "http://x.test/r"}, None, 0)
    assert r1 != r2


def test_page_pseudo_field():
    rules = keys.KeyRules({"Review": ["@page", "n"]})
    a = rules.key("Review", {"n": 1}, "http://x.test/p?b=1&a=2", 0)
    assert a == rules.key("Review", {"n": 1}, "http://x.test/p?a=2&b=1", 3)
    assert a != rules.key("Review", {"n": 1}, "http://x.test/q", 0)
    with pytest.raises(keys.InvalidKey, match="@page"):
        rules.key("Review", {"n": 1}, None, 0)


@pytest.mark.parametrize(
    "item,msg",
    [({}, "missing"), ({"sku": None}, "empty"), ({"sku": ""}, "empty"), ({"sku": object()}, "expected a string")],
)
def test_invalid_declared_keys(item, msg):
    with pytest.raises(keys.InvalidKey, match=msg):
        keys.KeyRules({"*": ["sku"]}).key("dict", item, "http://x.test/", 0)


def test_item_without_page_or_declared_key_is_invalid():
    with pytest.raises(keys.InvalidKey, match="SCALE_ITEM_KEY"):
        keys.KeyRules().key("dict", {"a": 1}, None, 0)


def test_item_key_setting_is_validated():
    assert as_item_key('{"A": "sku"}') == {"A": ["sku"]}
    for bad in ('{"A": []}', '{"A": [1]}', "[1]"):
        with pytest.raises(ValueError):
            as_item_key(bad)
    with pytest.raises(config.ScaleSettingError, match="^SCALE_ITEM_KEY"):
        config.get(Settings({"SCALE_ITEM_KEY": '{"A": []}'}), "SCALE_ITEM_KEY")
    with pytest.raises(config.ScaleSettingError, match="^SCALE_STORE_URL: unknown URL scheme 'mysql'"):
        config.get(Settings({"SCALE_STORE_URL": "mysql://h/db"}), "SCALE_STORE_URL")
    assert as_meta_fields({"first_seen": "seen"})["first_seen"] == "seen"
    for bad in ({"nope": "x"}, {"job": "a.b"}, {"job": "_run_id"}):
        with pytest.raises(ValueError):
            as_meta_fields(bad)


class Color(Enum):
    RED = "red"


def test_encoding_rules():
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    u = uuid.UUID(int=7)
    doc = encode_value(
        {
            "when": when,
            "day": dt.date(2026, 1, 2),
            "dur": dt.timedelta(minutes=1),
            "price": Decimal("19.990"),
            "raw": b"\x00\xff",
            "tags": {"b", "a", "c"},
            "t": (1, 2),
            "nan": float("nan"),
            "inf": float("-inf"),
            "big": 2**70,
            "color": Color.RED,
            "id": u,
            "nested": {"k": {3}, 1: "int key"},
        }
    )
    assert doc == {
        "when": "2026-01-02T03:04:05+00:00",
        "day": "2026-01-02",
        "dur": 60.0,
        "price": "19.990",
        "raw": base64.b64encode(b"\x00\xff").decode(),
        "tags": ["a", "b", "c"],
        "t": [1, 2],
        "nan": "NaN",
        "inf": "-Infinity",
        "big": str(2**70),
        "color": "red",
        "id": str(u),
        "nested": {"k": [3], "1": "int key"},
    }


def test_nested_items_are_encoded_through_itemadapter():
    @dataclasses.dataclass
    class Inner:
        x: int

    class Outer(scrapy.Item):
        inner = scrapy.Field()

    assert encode_value(Outer(inner=Inner(1))) == {"inner": {"x": 1}}


@pytest.mark.parametrize(
    "fields,msg",
    [
        ({"a": object()}, "no rule to store a builtins.object"),
        ({"a": {"$where": 1}}, r"\$ prefix"),
        ({"a.b": 1}, "top level"),
        ({"_id": 1}, "top level"),
        ({"_job": 1}, "bookkeeping"),
        ({"a": {(1, 2): 1}}, "not a string"),
    ],
)
def test_unencodable_values_are_refused_with_a_reason(fields, msg):
    with pytest.raises(Unencodable, match=msg):
        encode_item(fields, {"_job"})
