"""Exactly-once feeds across kill -9 and resume (docs/storage.md#feeds-across-a-crash): each
item in the store is in the job's feed output once, in every format and local storage.

Real parts: the catalog spiders with the add-on (SQLite frontier and item store), Scrapy's
own FeedExporter and exporters writing local files, SIGKILL three times at moments chosen
from progress (rows in the item store), the same `scrapy crawl` again until the job ends;
then each feed is parsed whole (a line cut short, an unterminated array or document, a
second CSV header: the parse fails) and its items compared with the store's rows by key.

Before the cut-back (storage/feed_files.py): the killed runs' lines stayed in an appended
file and the resumed run re-sent them: `-o` JSON lines held items two or three times, and
`-o` JSON / XML were unterminated in the middle of the file."""

from __future__ import annotations

import csv
import json
import os
import signal
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.storage.keys import page_key
from scrapy_scale.testbed import Testbed
from tests.crawl.test_feed_resume import kill_once_stored
from tests.support.crash_support import HOLD, stored_items
from tests.support.crawling import CrawlProcess, CrawlResult, start_crawl
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl

#: when the three runs are killed: rows in the item store (of 160 items), or a line of the
#: resumed run's log: right after it cut the killed run's files back, while it re-sends
KILL_AT: tuple[int | str, ...] = (25, "feeds: a killed run of this job had written to local feed files", 100)
#: an older finished run's lines at the head of the appended JSON lines file: not ours to touch
OLDER = "".join(json.dumps({"url": f"http://older.test/{n}", "title": "older run"}) + "\n" for n in range(3))


def feed_urls(path: Path) -> list[str]:
    """The ``url`` of each item of a feed, by its format (from the name); the whole file must parse."""
    if not path.exists():
        return []
    if path.suffix in (".jsonl", ".jl"):
        return [json.loads(line)["url"] for line in path.read_text().splitlines()]
    if path.suffix == ".json":
        return [i["url"] for i in json.loads(path.read_text())]
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            return [row["url"] for row in csv.DictReader(f)]
    assert path.suffix == ".xml", path
    return [str(item.findtext("url")) for item in ET.parse(path).getroot().iter("item")]


def wait_for(proc: CrawlProcess, done: Any) -> None:
    """Wait until ``done()`` while the crawl runs."""
    deadline = time.monotonic() + hang_guard(90)
    while time.monotonic() < deadline and proc.poll() is None and not done():
        time.sleep(0.01)
    assert proc.poll() is None and done(), proc.result().tail()


def kill_at_line(proc: CrawlProcess, text: str) -> None:
    """SIGKILL the crawl once its log has a line with ``text``."""
    log = proc.run_dir / "crawl.log"
    wait_for(proc, lambda: text in log.read_text(errors="replace"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(hang_guard(10))


def crash_three_times_and_resume(
    tb: Testbed,
    tmp_path: Path,
    settings_for: Any,
    opened: Path,
    spider: str = "catalog",
    args: tuple[str, ...] = (),
) -> list[CrawlResult]:
    """Three runs killed at KILL_AT, then the run that ends the job; every run's result.
    ``settings_for(n)``: the settings of the n-th run (1-based); ``opened``: a feed file
    that does not exist before the first run opens it (that run is killed once it has)."""
    store_url = f"sqlite:///{tmp_path}/state/items.sqlite"
    results = []
    for n, when in enumerate(KILL_AT, start=1):
        proc = start_crawl(tb, settings_for(n), tmp_path, spider=spider, extra_args=args)
        if n == 1:
            wait_for(proc, opened.exists)  # so the next run has files to cut back
        if isinstance(when, int):
            killed_at = kill_once_stored(proc, store_url, when)
            assert killed_at < len(tb.detail_urls()), "the job ended before its kill"
        else:
            kill_at_line(proc, when)
        results.append(proc.result())
    tb.set_faults("")
    results.append(
        start_crawl(tb, settings_for(len(KILL_AT) + 1), tmp_path, spider=spider, extra_args=args).finish(240)
    )
    assert results[-1].returncode == 0, results[-1].tail()
    return results


def check_exactly_once(tmp_path: Path, runs: list[CrawlResult], feeds: dict[str, list[Path]]) -> set[str]:
    """Each feed (a name -> its files) holds each stored item once; the stored keys."""
    stored = {d["_id"] for d in stored_items(f"sqlite:///{tmp_path}/state/items.sqlite")}
    for name, files in feeds.items():
        keys = Counter(page_key(u) for f in files for u in feed_urls(f))
        twice = {k: n for k, n in keys.items() if n > 1}
        assert not twice, f"{name}: {len(twice)} item(s) more than once"
        assert set(keys) == stored, f"{name}: {len(stored - set(keys))} missing, {len(set(keys) - stored)} not stored"
    for r in runs:
        assert "ScrapyDeprecationWarning" not in r.log, r.log[-3000:]
    # the resumed runs cut back what their killed predecessor wrote and said so once (run 2
    # may have been killed before it opened a feed: run 3 then had nothing to cut); those
    # not killed at that line went on to re-send
    cuts = [r.log.count("feeds: a killed run of this job had written to local feed files") for r in runs]
    assert cuts[1] == cuts[3] == 1 and cuts[2] <= 1, cuts
    for r in runs[2:]:
        assert "feeds: re-sent" in r.log, r.tail()
    assert not list((tmp_path / "state").glob("feed_journal/**/*.keys")), "a journal outlived a clean close"
    return stored


@pytest.mark.timeout(600)
@pytest.mark.parametrize("flag", ["-o", "-O"])
def test_local_feeds_of_every_format_hold_each_item_once_across_three_kills(tmp_path: Path, flag: str) -> None:
    """``-o`` (append; the JSON lines file holds an older finished run's lines first) and
    ``-O`` (overwrite), in JSON lines, JSON, CSV and XML at once."""
    out = tmp_path / "out"
    out.mkdir()
    files = [out / f"items.{ext}" for ext in ("jsonl", "json", "csv", "xml")]
    if flag == "-o":
        files[0].write_text(OLDER)
    args = tuple(a for f in files for a in (flag, str(f)))
    with Testbed(hosts=2, pages=80, seed=21, faults=HOLD) as tb:  # HOLD: no run ends before its kill
        runs = crash_three_times_and_resume(
            tb, tmp_path, lambda n: {"LOG_LEVEL": "INFO", "FEEDS": None}, files[1], args=args
        )
        assert len(tb.detail_urls()) == 160
    if flag == "-o":
        head = files[0].read_text()[: len(OLDER)]
        assert head == OLDER, "the older run's lines were changed"
        files[0].write_text(files[0].read_text()[len(OLDER) :])
    check_exactly_once(tmp_path, runs, {f.name: [f] for f in files})


@pytest.mark.timeout(600)
def test_feeds_with_uri_params_item_classes_and_a_file_per_job_hold_each_item_once(tmp_path: Path) -> None:
    """``FEEDS``: files named by ``%(time)s`` and ``%(batch_id)d`` (a new set each run, the
    killed runs' beside them), a feed per run as scrapyd gives each job, and ``item_classes``
    filters: the feed of the spider's item class gets each item once, the feed of another
    class none (the re-sent items are filtered as the crawled ones)."""
    out = tmp_path / "out"

    def settings_for(n: int) -> dict[str, Any]:
        return {
            "LOG_LEVEL": "INFO",
            "SPIDER_MODULES": ["tests.support.variant_spiders"],
            "SCALE_JOB": "catalog",
            "FEEDS": {
                str(out / "stamped-%(batch_id)d-%(time)s.csv"): {"format": "csv", "batch_item_count": 30},
                # as scrapyd gives each job its items file: file://<items_dir>/<project>/<spider>/<job>.jl
                (tmp_path / f"crawl{n}" / "items.jl").as_uri(): {"format": "jsonlines"},
                str(out / "mine.xml"): {
                    "format": "xml",
                    "item_classes": ["tests.support.variant_spiders.CatalogItem"],
                    "overwrite": True,
                },
                str(out / "others.jsonl"): {"format": "jsonlines", "item_classes": ["scrapy.Item"]},
                str(out / "none.jsonl"): {
                    "format": "jsonlines",
                    "item_classes": ["scrapy.http.Request"],  # not an item class of this spider
                },
            },
        }

    with Testbed(hosts=2, pages=80, seed=22, faults=HOLD) as tb:
        runs = crash_three_times_and_resume(tb, tmp_path, settings_for, out / "others.jsonl", spider="catalog_items")
    stamped = sorted(out.glob("stamped-*.csv"))
    per_job = [r.run_dir / "items.jl" for r in runs]
    # the killed runs' files were removed (begun by them), the last run's hold every item: 30 a file
    assert sorted(int(p.name.split("-")[1]) for p in stamped) == [1, 2, 3, 4, 5, 6], stamped
    check_exactly_once(
        tmp_path,
        runs,
        {"stamped": stamped, "per job": per_job, "mine.xml": [out / "mine.xml"], "others": [out / "others.jsonl"]},
    )
    assert feed_urls(out / "none.jsonl") == []  # no item of that class: nothing re-sent to it either
