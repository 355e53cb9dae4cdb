"""Feeds across kill -9 and resume (docs/storage.md#feeds-across-a-crash): every item that
reached the item store reaches every configured feed at least once.

Real parts: the catalog spider with the add-on (SQLite frontier and item store), Scrapy's
own FeedExporter writing a local JSON-lines file, a SIGKILL chosen from progress (items
stored), the same `scrapy crawl` again until the job ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.storage.backends import open_store
from scrapy_scale.storage.feeds import journal_folder
from scrapy_scale.storage.keys import page_key
from scrapy_scale.testbed import Testbed
from tests.crawl.test_frontier_disk_full import fill
from tests.support.crash_support import HOLD
from tests.support.crawling import run_crawl, start_crawl
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl


def feed_keys(path: Path) -> list[str]:
    """Item keys in a JSON-lines feed; a line cut short by the kill is not an item."""
    keys = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            keys.append(page_key(item["url"]))
    return keys


def kill_once_stored(proc: Any, store_url: str, rows: int) -> int:
    """SIGKILL the crawl once ``rows`` items are in the store; the stored count at the kill."""
    watch = open_store(store_url, "items")
    watch.open()
    try:
        deadline = time.monotonic() + hang_guard(90)
        while time.monotonic() < deadline and proc.poll() is None and watch.count() < rows:
            time.sleep(0.02)
        assert proc.poll() is None, "the crawl ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(hang_guard(10))
        return watch.count()
    finally:
        watch.close()


@pytest.mark.timeout(400)
@pytest.mark.parametrize("how", ["FEEDS", "-o", "item_classes"])
def test_every_stored_item_reaches_the_feeds_across_kill_9_and_resume(tmp_path: Path, how: str) -> None:
    store_url = f"sqlite:///{tmp_path}/state/items.sqlite"
    out = tmp_path / "out.jsonl"
    # FEEDS: start_crawl gives each run its own crawlN/items.jsonl (as scrapyd gives each
    # schedule its own items file); -o: both runs append to one file, as a user would;
    # item_classes: items of a scrapy.Item class, to one file whose feed takes only that class
    # (before: the re-sent items were plain dicts, which that feed refused)
    settings: dict[str, Any] = {"LOG_LEVEL": "INFO"}
    args: list[str] = []
    spider = "catalog"
    if how == "-o":
        settings["FEEDS"] = None
        args = ["-o", str(out)]
    elif how == "item_classes":
        spider = "catalog_items"
        settings["SPIDER_MODULES"] = ["tests.support.variant_spiders"]
        settings["SCALE_JOB"] = "catalog"
        settings["FEEDS"] = {
            str(out): {"format": "jsonlines", "item_classes": ["tests.support.variant_spiders.CatalogItem"]}
        }
    with Testbed(hosts=2, pages=150, seed=11, faults=HOLD) as tb:  # HOLD: the run cannot end before its kill
        expected = {page_key(u) for u in tb.detail_urls()}
        proc = start_crawl(tb, settings, tmp_path, spider=spider, extra_args=args)
        killed_at = kill_once_stored(proc, store_url, 60)
        assert 0 < killed_at < len(expected)
        first_run = proc.run_dir
        tb.set_faults("")
        second = start_crawl(tb, settings, tmp_path, spider=spider, extra_args=args).finish(240)
        assert second.returncode == 0, second.tail()
    s = open_store(store_url, "items")
    s.open()
    stored = {d["_id"] for d in s.documents()}
    s.close()
    assert stored == expected
    if how != "FEEDS":
        in_feeds = feed_keys(out)
    else:
        in_feeds = feed_keys(first_run / "items.jsonl") + feed_keys(second.run_dir / "items.jsonl")
    missing = stored - set(in_feeds)
    assert not missing, f"{len(missing)} of {len(stored)} stored items are in no feed"
    # the resumed run said what it re-sent, and its own feed was closed cleanly: no journal left
    assert "feeds: re-sent" in second.log, second.tail()
    assert second.stats["scale/store/feed_resent"] > 0, second.tail()
    assert not list((tmp_path / "state").glob("feed_journal/**/*.keys")), "a journal outlived a clean close"


def test_a_bad_journal_line_or_an_unknown_key_is_skipped_with_one_warning(tmp_path: Path) -> None:
    """The journal is read-back state; also checks compat.feed_exporter / export_to_feeds
    (Scrapy's FeedExporter found among the extensions, an item written through its
    item_scraped) in a real crawl."""
    with Testbed(hosts=1, pages=4, seed=2) as tb:
        first = run_crawl(tb, {"LOG_LEVEL": "INFO"}, tmp_path, timeout=120)
        assert first.returncode == 0 and len(first.items) == 4, first.tail()
        assert "feeds: re-sent" not in first.log  # nothing to re-send: no journal read, no cost
        assert not list((tmp_path / "state").glob("feed_journal/*/*.keys"))
        kept = first.items[0]
        folder = journal_folder(str(tmp_path / "state"), "catalog")
        # a dead process's journal: a garbled line, a key the store never had, a real key twice
        (folder / "999999999-1.keys").write_text(
            "\n".join([json.dumps(page_key(kept["url"])), "\x00garbage{", json.dumps("no-such-key")])
            + "\n"
            + json.dumps(page_key(kept["url"]))
            + "\n"
        )
        second = run_crawl(tb, {"LOG_LEVEL": "INFO"}, tmp_path, timeout=120)
    assert second.returncode == 0, second.tail()
    assert "feeds: re-sent 1 item(s) stored by a crashed run" in second.log, second.tail()
    warnings = [line for line in second.log.splitlines() if "WARNING" in line and "feeds:" in line]
    assert len(warnings) == 1 and "skipped 1 unreadable journal line(s) and 1 key(s)" in warnings[0], warnings
    # re-sent as the item's own fields (the store's bookkeeping fields left out), before the crawl's
    assert second.items[0] == kept, second.items[0]
    # re-sent, then crawled again (its page was never acked: the journal was made up), and
    # not written a second time (before: the feed held it twice)
    assert [i["url"] for i in second.items].count(kept["url"]) == 1
    assert second.stats["scale/store/feed_resent"] == 1 and second.stats["scale/store/feed_kept_resent"] == 1
    assert not list(folder.glob("*.keys")), "the adopted journal outlived a clean close"


@pytest.mark.timeout(300)
def test_a_journal_that_cannot_be_written_stops_the_crawl_and_nothing_is_lost(tmp_path: Path) -> None:
    """The job's journal folder is a full 64 KB tmpfs (needs root, as CI has). Before: the
    failed write was raised inside the reactor's callFromThread, no waiting item was
    resolved and the crawl hung for ever (even Ctrl-C did)."""
    folder = journal_folder(str(tmp_path / "state"), "catalog")
    folder.mkdir(parents=True)
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mount.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (this test needs root, as CI has): {mount.stderr.strip()}")
    try:
        filler = fill(folder)
        with Testbed(hosts=1, pages=30, seed=5) as tb:
            expected = {page_key(u) for u in tb.detail_urls()}
            first = run_crawl(tb, {"LOG_LEVEL": "INFO"}, tmp_path, timeout=120)
            assert first.returncode == 1, first.tail()
            # one line of ours; Scrapy logs each failed item (item_error) as it does for store_failed
            errors = [x for x in first.log.splitlines() if " ERROR: " in x and "[scrapy.core.scraper]" not in x]
            assert len(errors) == 1 and "cannot write the feed journal" in errors[0], errors
            assert "No space left on device" in errors[0] and "not acked" in errors[0]
            assert first.stats["finish_reason"] == "feed_journal_failed"
            assert not first.items and first.stats.get("item_scraped_count", 0) == 0  # nothing acked
            filler.unlink()  # space again: the next run crawls the unacked pages again
            second = run_crawl(tb, {"LOG_LEVEL": "INFO"}, tmp_path, timeout=120)
        assert second.returncode == 0, second.tail()
        assert expected <= set(feed_keys(first.run_dir / "items.jsonl") + feed_keys(second.run_dir / "items.jsonl"))
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
