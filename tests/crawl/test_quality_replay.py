"""Raw snapshots of failed parses and ``scrapy scale replay``: after a layout change, the
fixed spider parses the kept responses again and the missing items are stored, with no
request to the testbed (its log shows none). Real crawls, real SQLite stores and frontier."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scrapy_scale.frontier import cli_ops
from scrapy_scale.quality.raw_pages import SnapshotDir
from scrapy_scale.storage.backends import open_store
from scrapy_scale.testbed import Testbed
from tests.support.crawling import ROOT, UNPACED, run_crawl

pytestmark = pytest.mark.crawl

ADDON = {"ADDONS": {"scrapy_scale.Addon": 0}, **UNPACED}  # pacing is not under test here

FIXED_SPIDER = '''
from example_project.spiders.catalog import CatalogSpider


class FixedCatalogSpider(CatalogSpider):
    """The catalog spider, fixed for the new layout (h1.name, span.product-code, span.cost)."""

    name = "catalog_fixed"

    def parse_item(self, response):
        sku = response.css("span.sku::text, span.product-code::text").get()
        if not sku:
            return
        price = response.css("span.price::text, span.cost::text").get()
        yield {
            "sku": sku.strip(),
            "title": (response.css("h1.title::text, h1.name::text").get() or "").strip() or None,
            "price": float(price) if price else None,
            "url": response.url,
        }
'''


def stored(tmp_path: Path) -> dict[str, dict]:
    s = open_store(f"sqlite:///{tmp_path}/state/items.sqlite", "items")
    s.open()
    try:
        return {d["_source_url"]: d for d in s.documents()}
    finally:
        s.close()


def test_replay_after_a_layout_change_stores_the_missing_items_without_a_request(tmp_path: Path) -> None:
    pkg = tmp_path / "spiders_pkg"
    pkg.mkdir()
    (pkg / "quality_fixed.py").write_text(textwrap.dedent(FIXED_SPIDER))
    settings = {
        **ADDON,
        "SCALE_CRITICAL_FIELDS": ["sku", "price"],
        "SPIDER_MODULES": ["example_project.spiders", "quality_fixed"],
    }
    with Testbed(hosts=1, pages=30, seed=6, faults="layout:/item/*,after=20,variant=renamed") as tb:
        res = run_crawl(tb, settings, tmp_path, env={"PYTHONPATH": str(pkg)})
        assert res.returncode == 0, res.tail()
        changed = {u for u in tb.detail_urls() if int(u.rsplit("/", 1)[1]) > 20}
        assert set(stored(tmp_path)) == tb.detail_urls() - changed
        assert res.stats["scale/quality/snapshots"] == len(changed)
        snaps = SnapshotDir(str(tmp_path / "state" / "quality" / "catalog" / "snapshots"))
        assert len(snaps.entries("parse_failed")) == len(changed)
        assert {snaps.read(n)["url"] for n in snaps.files()} == changed
        with cli_ops.open_job({"SCALE_STATE_DIR": str(tmp_path / "state")}, "catalog") as ops:
            assert ops.status()["failed_by_class"] == {"parse_failed": len(changed)}

        served = len(tb.log)
        env = dict(
            os.environ,
            SCRAPY_SETTINGS_MODULE="crawl_settings_1",
            PYTHONPATH=os.pathsep.join([str(res.run_dir), str(ROOT), str(pkg)]),
        )
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "scrapy",
                "scale",
                "replay",
                "catalog",
                "--class",
                "parse_failed",
                "--spider",
                "catalog_fixed",
                "-a",
                "start_urls=" + ",".join(tb.start_urls),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert len(tb.log) == served, f"the replay sent {len(tb.log) - served} request(s) to the testbed"
    (tmp_path / "replay.log").write_text(out.stderr)
    assert f"{len(changed)} request(s) marked done in the frontier" in out.stdout, out.stdout + out.stderr[-3000:]
    docs = stored(tmp_path)
    assert set(docs) == tb.detail_urls(), "the missing items are stored"
    for url in changed:
        assert {k: docs[url][k] for k in ("sku", "title", "price", "url")} == tb.expected_item(url)
        assert str(docs[url]["_run_id"]) == str(res.stats["scale/frontier/run"]), "stored under the crawl's run"
    with cli_ops.open_job({"SCALE_STATE_DIR": str(tmp_path / "state")}, "catalog") as ops:
        st = ops.status()
    assert st["failed_by_class"] == {} and st["counts"]["done"] == 30 + 2  # the items and 2 listing pages
    assert snaps.entries() == [], "replayed snapshots are dropped once their requests are done"
