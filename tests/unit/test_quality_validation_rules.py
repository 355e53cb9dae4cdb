"""Validation before storage (scrapy_scale.quality.ValidationPipeline): critical fields and
JSON Schemas; invalid items go to the quarantine collection, never to the main store.
Real crawls of the catalog against the testbed, real SQLite / MongoDB (SecantusDB) stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrapy_scale import config
from scrapy_scale.quality.validate import Validator, content_hash, reason_kind

pytestmark = pytest.mark.pure


# ---- the validator (plain Python) --------------------------------------------------------


@pytest.mark.parametrize("empty", [None, "", "   \n", [], {}, ()])
def test_empty_values_count_as_missing(empty) -> None:
    v = Validator({"*": ("sku", "price")}, {})
    verdict = v.check({"sku": "A1", "price": empty})
    assert verdict.missing == ("price",) and verdict.reasons == ["missing critical field price"]
    assert not verdict.ok
    assert v.check({"sku": "A1", "price": 0}).ok, "0 is a value, not a missing field"


def test_schema_errors_are_reasons_and_nothing_configured_means_nothing_to_do() -> None:
    v = Validator(
        {}, {"*": {"type": "object", "required": ["sku"], "properties": {"price": {"type": "number", "minimum": 0}}}}
    )
    assert v
    verdict = v.check({"price": "12"})
    assert not verdict.ok
    assert any("'sku' is a required property" in r for r in verdict.reasons)
    assert any(r.startswith("schema: $.price: ") for r in verdict.reasons)
    assert v.check({"sku": "x", "price": 3.5}).ok
    assert not Validator({}, {}), "no critical field and no schema: the pipeline does no work"


def test_per_type_fields_and_schemas() -> None:
    class ProductItem(dict):
        pass

    v = Validator({"ProductItem": ("sku",)}, {"ProductItem": {"required": ["title"]}})
    assert v.check({"other": 1}).ok, "types without an entry are not checked"
    bad = v.check(ProductItem(sku=" "))
    assert bad.missing == ("sku",) and len(bad.reasons) == 2


def test_reason_kinds_and_content_hash() -> None:
    assert reason_kind("missing critical field price") == "missing/price"
    assert reason_kind("schema: $.price: 'x' is not of type 'number'") == "schema"
    assert content_hash({"a": 1, "b": [1, 2]}, ["a", "b"]) == content_hash({"b": [1, 2], "a": 1, "c": 3}, ["a", "b"])
    assert content_hash({"c": 1}, ["a"]) is None


def test_bad_schema_fails_at_startup_with_the_setting_name(tmp_path: Path) -> None:
    with pytest.raises(config.ScaleSettingError, match="SCALE_QUALITY_SCHEMAS: 'x': not a valid JSON Schema"):
        config.get({"SCALE_QUALITY_SCHEMAS": {"x": {"type": "nope"}}}, "SCALE_QUALITY_SCHEMAS")
    f = tmp_path / "s.json"
    f.write_text('{"type": "object", "required": ["sku"]}')
    assert config.get({"SCALE_QUALITY_SCHEMAS": {"*": str(f)}}, "SCALE_QUALITY_SCHEMAS") == {
        "*": {"type": "object", "required": ["sku"]}
    }
