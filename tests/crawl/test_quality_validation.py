"""Validation before storage (scrapy_scale.quality.ValidationPipeline): critical fields and
JSON Schemas; invalid items go to the quarantine collection, never to the main store.
Real crawls of the catalog against the testbed, real SQLite / MongoDB (SecantusDB) stores."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from scrapy_scale.frontier.ops import cli_ops
from scrapy_scale.storage.backends import open_store
from scrapy_scale.testbed import Testbed
from tests.support.crawling import UNPACED, run_crawl

pytestmark = pytest.mark.crawl

ADDON = {"ADDONS": {"scrapy_scale.Addon": 0}, **UNPACED}  # pacing is not under test here


# ---- real crawls ---------------------------------------------------------------------------


def _read(url: str, table: str, collection: str = "items") -> list[dict]:
    s = open_store(url, collection, table if table != collection else None)
    s.open()
    try:
        return list(s.dead_letters()) if table != collection else list(s.documents())
    finally:
        s.close()


def _check_quarantine(tb: Testbed, url: str, res, bad: set[str]) -> None:
    assert res.returncode == 0, res.tail()
    stored = _read(url, "items")
    quarantined = _read(url, "items_quarantine")
    stored_urls = {d["_source_url"] for d in stored}
    q_urls = {d["source_url"] for d in quarantined}
    assert q_urls == bad, "every invalid item is in the quarantine"
    assert stored_urls == tb.detail_urls() - bad, "the main store has every valid item"
    assert not stored_urls & q_urls, "a quarantined item never reaches the main store"
    assert all(d["reason"] and d["job"] == "catalog" and d["item"] for d in quarantined)
    st = res.stats
    assert st["scale/quality/validated"] == len(tb.detail_urls())
    assert st["scale/quality/quarantined"] == len(bad)
    assert st["scale/store/written"] == len(tb.detail_urls()) - len(bad)
    assert st["scale/quality/invalid_rate"] == round(len(bad) / len(tb.detail_urls()), 4)


def _failed_by_class(tmp_path: Path) -> dict[str, int]:
    with cli_ops.open_job({"SCALE_STATE_DIR": str(tmp_path / "state")}, "catalog") as ops:
        return ops.status()["failed_by_class"]


def test_layout_change_missing_price_is_quarantined_sqlite(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=30, seed=5, faults="layout:/item/*,after=20,variant=missing") as tb:
        url = f"sqlite:///{tmp_path}/state/items.sqlite"
        res = run_crawl(tb, {**ADDON, "SCALE_CRITICAL_FIELDS": ["sku", "price"]}, tmp_path)
        bad = {u for u in tb.detail_urls() if int(u.rsplit("/", 1)[1]) > 20}
        _check_quarantine(tb, url, res, bad)
        quarantined = _read(url, "items_quarantine")
        assert {d["reason"] for d in quarantined} == {"missing critical field price"}
        assert res.stats["scale/quality/missing/price"] == 10
        assert _failed_by_class(tmp_path) == {"parse_failed": 10}, "their requests are failed, not done"


def test_schema_failures_are_quarantined_and_their_requests_failed(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=24, seed=2) as tb:
        prices = sorted(tb.expected_item(u)["price"] for u in tb.detail_urls())
        cap = prices[len(prices) // 2]
        bad = {u for u in tb.detail_urls() if tb.expected_item(u)["price"] > cap}
        schema = {
            "type": "object",
            "required": ["sku", "price"],
            "properties": {"price": {"type": "number", "maximum": cap}},
        }
        res = run_crawl(tb, {**ADDON, "SCALE_QUALITY_SCHEMAS": {"*": schema}}, tmp_path)
        url = f"sqlite:///{tmp_path}/state/items.sqlite"
        _check_quarantine(tb, url, res, bad)
        assert all(d["reason"].startswith("schema: $.price: ") for d in _read(url, "items_quarantine"))
        # the outcome was ok (the parse found its fields): the quarantine fails the request
        assert _failed_by_class(tmp_path) == {"parse_failed": len(bad)}
        assert "item quarantined: schema" in (tmp_path / "state" / "frontier.db").read_bytes().decode("latin-1")


def test_quarantine_in_mongodb(tmp_path: Path, mongo_uri: str) -> None:
    url = f"{mongo_uri.rstrip('/')}/q{uuid.uuid4().hex[:10]}"
    with Testbed(hosts=1, pages=30, seed=5, faults="layout:/item/*,after=25,variant=missing") as tb:
        res = run_crawl(tb, {**ADDON, "SCALE_STORE_URL": url, "SCALE_CRITICAL_FIELDS": "sku,price"}, tmp_path)
        bad = {u for u in tb.detail_urls() if int(u.rsplit("/", 1)[1]) > 25}
        _check_quarantine(tb, url, res, bad)


def test_default_crawl_does_no_validation_work(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=10, seed=1) as tb:
        res = run_crawl(tb, ADDON, tmp_path)
    assert res.returncode == 0, res.tail()
    assert res.stats["scale/store/written"] == 10
    assert not any(k.startswith(("scale/quality/validated", "scale/quality/quarantined")) for k in res.stats)
    assert "validating items" not in res.log
