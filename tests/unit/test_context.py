"""The per-crawler context: typed offers, and one shared object per class and crawler."""

from __future__ import annotations

import dataclasses

import pytest
from scrapy.utils.test import get_crawler

from scrapy_scale.context import ScaleContext

pytestmark = pytest.mark.pure


class Counted:
    made = 0

    def __init__(self) -> None:
        Counted.made += 1


def test_shared_makes_one_object_per_class_and_crawler() -> None:
    a, b = get_crawler(), get_crawler()
    Counted.made = 0
    first = ScaleContext.of(a).shared(Counted, Counted)
    assert ScaleContext.of(a).shared(Counted, Counted) is first
    assert Counted.made == 1
    other = ScaleContext.of(b).shared(Counted, Counted)
    assert other is not first and Counted.made == 2
    # another class is another object
    assert ScaleContext.of(a).shared(dict, dict) == {}


def test_offers_are_typed_fields_not_string_keys() -> None:
    names = {f.name for f in dataclasses.fields(ScaleContext)}
    assert "extra" not in names
    assert {"pacer", "egress_pool", "browser", "store", "snapshot_index", "quality_figures", "quality_report"} <= names
    ctx = ScaleContext.of(get_crawler())
    assert ctx.pacer is None and ctx.egress_pool is None and ctx.browser is None
