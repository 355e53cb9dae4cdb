"""Raw snapshots of failed parses and ``scrapy scale replay``: after a layout change, the
fixed spider parses the kept responses again and the missing items are stored, with no
request to the testbed (its log shows none). Real crawls, real SQLite stores and frontier."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.frontier.ops import cli_ops
from scrapy_scale.quality.raw_pages import SnapshotDir
from scrapy_scale.storage.backends import open_store
from scrapy_scale.testbed import Testbed
from tests.support.crawling import ROOT, UNPACED, run_crawl
from tests.support.hang import hang_guard

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


#: a pipeline after the store's, for the crash test: once HOLD_AFTER items of the replay are
#: stored it writes HOLD_FILE and holds the process (the test kills it there), so the kill
#: comes at a moment chosen from progress, never from the clock
HOLD_PIPELINE = """
import os
import time


class HoldAfter:
    def __init__(self):
        self.n = 0

    def process_item(self, item):
        self.n += 1
        after, path = os.environ.get("HOLD_AFTER"), os.environ.get("HOLD_FILE")
        if after and path and self.n == int(after):
            with open(path, "w") as f:
                f.write(str(self.n))
            time.sleep(600)  # held here until the test kills the process
        return item
"""


def replay_env(res: Any, pkg: Path, module: str) -> dict[str, str]:
    return dict(
        os.environ,
        SCRAPY_SETTINGS_MODULE=module,
        PYTHONPATH=os.pathsep.join([str(res.run_dir), str(ROOT), str(pkg)]),
    )


def replay_argv(tb: Testbed, *args: str) -> list[str]:
    return [sys.executable, "-m", "scrapy", "scale", "replay", "catalog", "--class", "parse_failed", *args]


def replay(tb: Testbed, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = replay_argv(tb, *args, "-a", "start_urls=" + ",".join(tb.start_urls))
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=hang_guard(180))


def without(res: Any, *names: str) -> str:
    """A settings module: the crawl's, without ``names`` (the replay runs without them)."""
    module = "replay_settings_" + res.run_dir.name
    src = f"from {res.run_dir.name.replace('crawl', 'crawl_settings_')} import *  # noqa: F403\n"
    src += "".join(f"globals().pop({n!r}, None)\n" for n in names)
    (res.run_dir / f"{module}.py").write_text(src)
    return module


def quarantined(tmp_path: Path) -> list[dict]:
    q = open_store(f"sqlite:///{tmp_path}/state/items.sqlite", "items", "items_quarantine")
    q.open()
    try:
        return list(q.dead_letters())
    finally:
        q.close()


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


def test_replay_without_the_crawls_settings_stores_no_invalid_item(tmp_path: Path) -> None:
    """Issue 31: a crawl with SCALE_CRITICAL_FIELDS=sku,price quarantined the items of pages
    whose price went missing; a replay with the spider unchanged and the setting not given
    again stored them with no price, marked their requests done and removed the snapshots.
    The replay judges with the settings recorded with the snapshots: nothing invalid is
    stored, every snapshot is kept and its request stays failed."""
    pkg = tmp_path / "spiders_pkg"
    pkg.mkdir()
    settings = {**ADDON, "SCALE_CRITICAL_FIELDS": ["sku", "price"]}
    with Testbed(hosts=1, pages=30, seed=7, faults="layout:/item/*,after=20,variant=missing") as tb:
        res = run_crawl(tb, settings, tmp_path)
        assert res.returncode == 0, res.tail()
        changed = {u for u in tb.detail_urls() if int(u.rsplit("/", 1)[1]) > 20}
        snaps = SnapshotDir(str(tmp_path / "state" / "quality" / "catalog" / "snapshots"))
        assert {snaps.read(n)["url"] for n in snaps.entries("parse_failed")} == changed
        before = sorted(snaps.files())
        assert len(quarantined(tmp_path)) == len(changed)
        env = replay_env(res, pkg, without(res, "SCALE_CRITICAL_FIELDS"))
        served = len(tb.log)
        out = replay(tb, env)
        (tmp_path / "replay.log").write_text(out.stderr)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "0 came out ok, 0 item(s) stored, 0 request(s) marked done" in out.stdout, out.stdout
        recorded = 'judged with the settings recorded by the crawl: SCALE_CRITICAL_FIELDS={"*": ["sku", "price"]}'
        assert recorded in out.stdout, out.stdout
        docs = stored(tmp_path)
        assert set(docs) == tb.detail_urls() - changed, "no item without its price is stored"
        assert all(d["price"] is not None for d in docs.values())
        assert sorted(snaps.files()) == before, "every snapshot whose item still fails is kept"
        with cli_ops.open_job({"SCALE_STATE_DIR": str(tmp_path / "state")}, "catalog") as ops:
            assert ops.status()["failed_by_class"] == {"parse_failed": len(changed)}
        q = quarantined(tmp_path)
        assert len(q) == len(changed) and {r["source_url"] for r in q} == changed, "quarantined again, in place"

        # the user may judge otherwise, explicitly: it is said; a dry run writes nothing
        dry = replay(tb, env, "--dry-run", "-s", "SCALE_CRITICAL_FIELDS=sku")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert len(tb.log) == served, "a replay sends no request"
    n = len(changed)
    assert (
        f"dry run, nothing written: {n} snapshot(s) of class parse_failed replayed with spider catalog "
        f"(no network request): {n} would come out ok, {n} item(s) would be stored, {n} request(s) marked "
        f"done in the frontier, {n} snapshot(s) removed"
    ) in dry.stdout, dry.stdout
    assert "SCALE_CRITICAL_FIELDS given on the command line is used" in dry.stdout, dry.stdout
    assert set(stored(tmp_path)) == tb.detail_urls() - changed and sorted(snaps.files()) == before
    with cli_ops.open_job({"SCALE_STATE_DIR": str(tmp_path / "state")}, "catalog") as ops:
        assert ops.status()["failed_by_class"] == {"parse_failed": n}


def test_a_replay_killed_after_some_items_loses_no_snapshot_and_the_next_stores_each_page_once(
    tmp_path: Path,
) -> None:
    """kill -9 during a replay, once 5 of its items are stored (a pipeline after the store's
    holds the process there): every snapshot is still on disk and every request still failed;
    the next replay stores every fixed page once, marks its request done and drops its
    snapshot."""
    pkg = tmp_path / "spiders_pkg"
    pkg.mkdir()
    (pkg / "quality_fixed.py").write_text(textwrap.dedent(FIXED_SPIDER) + textwrap.dedent(HOLD_PIPELINE))
    settings = {
        **ADDON,
        "SCALE_CRITICAL_FIELDS": ["sku", "price"],
        "SPIDER_MODULES": ["example_project.spiders", "quality_fixed"],
        "ITEM_PIPELINES": {"quality_fixed.HoldAfter": 950},
    }
    with Testbed(hosts=1, pages=30, seed=8, faults="layout:/item/*,after=10,variant=renamed") as tb:
        res = run_crawl(tb, settings, tmp_path, env={"PYTHONPATH": str(pkg)})
        assert res.returncode == 0, res.tail()
        changed = {u for u in tb.detail_urls() if int(u.rsplit("/", 1)[1]) > 10}
        snaps = SnapshotDir(str(tmp_path / "state" / "quality" / "catalog" / "snapshots"))
        before = sorted(snaps.files())
        assert len(before) == len(changed)
        hold = tmp_path / "held"
        env = dict(replay_env(res, pkg, without(res, "SCALE_CRITICAL_FIELDS")), HOLD_AFTER="5", HOLD_FILE=str(hold))
        argv = replay_argv(tb, "--spider", "catalog_fixed", "-a", "start_urls=" + ",".join(tb.start_urls))
        with open(tmp_path / "replay1.log", "w") as log:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + hang_guard(120)
            while not hold.exists():
                assert proc.poll() is None, (tmp_path / "replay1.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the replay did not store 5 items"
                time.sleep(0.05)
            os.kill(proc.pid, 9)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == -9
        assert len(set(stored(tmp_path)) & changed) >= 5, "killed once 5 replayed items were stored"
        assert sorted(snaps.files()) == before, "a kill -9 during a replay loses no snapshot"
        with cli_ops.open_job({"SCALE_STATE_DIR": str(tmp_path / "state")}, "catalog") as ops:
            assert ops.status()["failed_by_class"] == {"parse_failed": len(changed)}

        out = replay(tb, {k: v for k, v in env.items() if k != "HOLD_AFTER"}, "--spider", "catalog_fixed")
        assert out.returncode == 0, out.stdout + out.stderr
    n = len(changed)
    assert f"{n} came out ok, {n} item(s) stored, {n} request(s) marked done in the frontier" in out.stdout, (
        out.stdout + out.stderr[-3000:]
    )
    s = open_store(f"sqlite:///{tmp_path}/state/items.sqlite", "items")
    s.open()
    try:
        rows = list(s.documents())
    finally:
        s.close()
    assert sorted(d["_source_url"] for d in rows) == sorted(tb.detail_urls()), "every page stored once"
    for d in rows:
        assert {k: d[k] for k in ("sku", "title", "price", "url")} == tb.expected_item(d["_source_url"])
    assert snaps.entries() == []
    with cli_ops.open_job({"SCALE_STATE_DIR": str(tmp_path / "state")}, "catalog") as ops:
        assert ops.status()["failed_by_class"] == {}
