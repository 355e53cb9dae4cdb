"""Parse checks as plain Python: critical fields and 'items expected'."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from scrapy.settings import Settings

from scrapy_scale import config
from scrapy_scale.outcomes.parse_checks import ItemCheck, expected_items, expects_items

pytestmark = pytest.mark.pure


@dataclass
class Product:
    sku: str | None = None
    price: float | None = None


def test_empty_values_do_not_count_as_present():
    check = ItemCheck(config.get(Settings({"SCALE_CRITICAL_FIELDS": ["sku", "price"]}), "SCALE_CRITICAL_FIELDS"))
    assert check.missing({"sku": "S1", "price": 0.0}) == ()  # zero is a value
    assert check.missing({"sku": "  ", "price": 3}) == ("sku",)
    assert check.missing({"sku": [], "price": None}) == ("sku", "price")
    assert check.missing({}) == ("sku", "price")
    assert check.missing(Product("S1", None)) == ("price",)


def test_per_item_class_fields():
    check = ItemCheck(
        config.get(Settings({"SCALE_CRITICAL_FIELDS": '{"Product": ["price"], "*": ["url"]}'}), "SCALE_CRITICAL_FIELDS")
    )
    assert check.missing(Product("S1", None)) == ("price",)
    assert check.missing({"sku": "x"}) == ("url",)
    assert not ItemCheck({})


def test_expectation_sources_in_order():
    class Spider:
        scale_expect_items = {"parse_item"}

        def parse(self, r):
            pass

        def parse_item(self, r):
            pass

        @expects_items
        def parse_detail(self, r):
            pass

    s = Spider()
    assert expected_items({}, s.parse_item, s)
    assert not expected_items({}, s.parse, s)
    assert expected_items({}, s.parse_detail, s)  # decorator
    assert not expected_items({"scale_expect_items": False}, s.parse_item, s)  # meta wins
    assert expected_items({"scale_expect_items": True}, s.parse, s)
    assert not expected_items({}, None, object())


@pytest.mark.parametrize("value", [{"Product": "price"}, ["price"], "price, sku"])
def test_critical_fields_forms(value):
    assert config.get(Settings({"SCALE_CRITICAL_FIELDS": value}), "SCALE_CRITICAL_FIELDS")
