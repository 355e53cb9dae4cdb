"""StorePipeline in real `scrapy crawl` subprocesses: the catalog against the testbed,
and a small spider of bad items. Stores are real (SQLite file, MongoDB wire server)."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from scrapy_scale.storage.backends import open_store
from scrapy_scale.storage.keys import page_key
from scrapy_scale.testbed import Testbed
from tests.support.crash_support import HOLD
from tests.support.crawling import run_crawl, start_crawl
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl

ONLY_STORE = {
    # the storage components alone (the add-on enables them too; this keeps the test about them)
    "ITEM_PIPELINES": {"scrapy_scale.storage.StorePipeline": 900},
    "SPIDER_MIDDLEWARES": {"scrapy_scale.storage.StoreSpiderMiddleware": 50},
}


def sqlite_store(tmp_path: Path):
    s = open_store(f"sqlite:///{tmp_path}/state/items.sqlite", "items")
    s.open()
    return s


def test_listing_pages_of_hundreds_of_items_are_stored_whole_with_the_add_on_defaults(tmp_path: Path) -> None:
    """The add-on bounds the items a response has in flight at once (CONCURRENT_ITEMS 16, not
    Scrapy's 100: docs/architecture.md, addon.py): every item of a page that yields hundreds
    still reaches the feed and the store, once."""
    settings = {
        "SPIDER_MODULES": ["tests.support.variant_spiders"],
        "SCALE_ITEM_KEY": {"*": ["sku"]},
        "SCALE_DOMAIN_PROFILES": {"default": {"start_delay": 0.0}},
    }
    with Testbed(hosts=2, pages=20, per_page=10, seed=3) as tb:
        res = run_crawl(
            tb, settings, tmp_path, spider="catalog_many", timeout=120, extra_args=["-a", "per_listing=300"]
        )
        assert res.returncode == 0, res.tail()
        details = tb.detail_urls()
    rows = [i for i in res.items if "#" in i["sku"]]
    assert {i["concurrent_items"] for i in rows} == {16}  # the add-on's bound was the one in force
    listings = {i["url"] for i in rows}
    assert len(listings) == 4  # two listing pages per host
    assert len(rows) == len({i["sku"] for i in rows}) == 300 * len(listings)
    assert {i["url"] for i in res.items if "#" not in i["sku"]} == details
    total = len(rows) + len(details)
    assert res.stats["item_scraped_count"] == res.stats["scale/store/written"] == total
    s = sqlite_store(tmp_path)
    try:
        assert len(list(s.documents())) == total
    finally:
        s.close()


def test_crawl_stores_each_page_item_once_and_a_second_run_updates_in_place(tmp_path: Path) -> None:
    with Testbed(hosts=2, pages=30, seed=3, faults="500:/item/4,first=1; 429:/item/9,first=1,retry_after=1") as tb:
        expected = {page_key(u): u for u in tb.detail_urls()}
        res = run_crawl(tb, {}, tmp_path, timeout=120)
        assert res.returncode == 0, res.tail()
        st = res.stats
        assert st["item_scraped_count"] == 60
        assert (st["scale/store/written"], st["scale/store/inserted"]) == (60, 60)
        assert st.get("scale/store/updated", 0) == 0 and st.get("scale/store/dead_lettered", 0) == 0
        assert st["scale/store/batches"] >= 1 and "scale/store/write_latency_max" in st
        s = sqlite_store(tmp_path)
        docs = {d["_id"]: d for d in s.documents()}
        assert set(docs) == set(expected), "stored keys are the detail pages' URL fingerprints"
        for key, url in expected.items():
            d = docs[key]
            assert {k: d[k] for k in ("sku", "title", "price", "url")} == tb.expected_item(url)
            assert d["_source_url"] == url and d["_job"] == "catalog" and d["_item_type"] == "dict"
            assert d["_first_seen"] == d["_last_seen"]
        first = {k: (d["_first_seen"], d["_run_id"]) for k, d in docs.items()}
        s.close()

        res2 = run_crawl(tb, {}, tmp_path, timeout=120)
        assert res2.returncode == 0, res2.tail()
        st2 = res2.stats
        assert st2["scale/store/written"] == 60 and st2.get("scale/store/inserted", 0) == 0
        assert st2["scale/store/updated"] == 60
        s = sqlite_store(tmp_path)
        docs2 = {d["_id"]: d for d in s.documents()}
        s.close()
        assert set(docs2) == set(expected), "a second run adds no row"
        for k, d in docs2.items():
            assert d["_first_seen"] == first[k][0] < d["_last_seen"]
            assert d["_run_id"] != first[k][1]


BAD_SPIDER = '''
import datetime, decimal
import scrapy
from scrapy import signals
from scrapy_scale.storage.keys import page_key


class Product(scrapy.Item):
    sku = scrapy.Field()
    when = scrapy.Field()
    price = scrapy.Field()
    raw = scrapy.Field()
    tags = scrapy.Field()
    blob = scrapy.Field()


class BadItemsSpider(scrapy.Spider):
    name = "bad_items"
    start_urls = ["data:text/plain,hello"]

    def parse(self, response):
        yield {"ok": 1}
        yield "not an item"
        yield Product(sku="A1", when=datetime.datetime(2026, 1, 2, 3, 4), price=decimal.Decimal("9.90"),
                      raw=b"hi", tags={"b", "a"})
        yield Product(sku="A1", price=decimal.Decimal("9.80"))  # same key again: an in-run duplicate
        yield Product(sku=None)  # invalid key
        yield Product(sku="A2", blob=object())  # no rule to encode
        yield Product(sku="A3", blob="x" * 5000)  # too large for the limit set below


class UnencodableSpider(scrapy.Spider):
    """One page per kind of item no rule can store, and one good page."""

    name = "unencodable"
    start_urls = ["data:text/plain,cycle", "data:text/plain,deep", "data:text/plain,ok"]

    def parse(self, response):
        kind = response.url.rsplit(",", 1)[1]
        if kind == "cycle":
            item = {"url": response.url}
            item["self"] = item
        elif kind == "deep":
            item = {"url": response.url, "tree": []}
            node = item["tree"]
            for _ in range(5000):
                node.append([])
                node = node[0]
        else:
            item = {"url": response.url}
        yield item


class ScrapedLog:
    """Appends the key of every item_scraped to a file, flushed at once (survives kill -9)."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    @classmethod
    def from_crawler(cls, crawler):
        ext = cls(crawler.settings.get("SCRAPED_LOG"))
        crawler.signals.connect(ext.scraped, signal=signals.item_scraped)
        return ext

    def scraped(self, item, response, spider):
        self.f.write(page_key(response.url) + "\\n")
        self.f.flush()
        import os
        os.fsync(self.f.fileno())
'''


def write_spiders(tmp_path: Path) -> dict[str, str]:
    pkg = tmp_path / "spiders_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "storage_test_spiders.py").write_text(textwrap.dedent(BAD_SPIDER))
    return {"PYTHONPATH": str(pkg)}


@pytest.mark.parametrize("drop", [False, True], ids=["update-duplicates", "drop-duplicates"])
def test_bad_items_never_crash_the_crawl(tmp_path: Path, drop: bool) -> None:
    env = write_spiders(tmp_path)
    settings = {
        **ONLY_STORE,
        "SPIDER_MODULES": ["storage_test_spiders"],
        "SCALE_ITEM_KEY": {"Product": ["sku"]},
        "SCALE_STORE_MAX_ITEM_BYTES": 2048,
        "SCALE_STORE_DROP_DUPLICATES": drop,
        "ADDONS": {},
        "FEEDS": None,  # the JSON feed exporter cannot write a set; the store can
    }
    res = run_crawl(None, settings, tmp_path, spider="bad_items", timeout=60, env=env)
    assert res.returncode == 0, res.tail()
    assert "BadItemsSpider.parse yielded a builtins.str" in res.log
    st = res.stats
    assert st["scale/store/dead_lettered"] == 4
    assert st["scale/store/duplicates_in_run"] == 1
    assert {k.rsplit("/", 1)[1]: v for k, v in st.items() if "dead_letter_reason/" in k} == {
        "not_an_item": 1,
        "invalid_key": 1,
        "unencodable": 1,
        "too_large": 1,
    }
    assert st["scale/store/inserted"] == 2
    assert st["scale/store/written"] == (2 if drop else 3)
    assert st["item_scraped_count"] == (2 if drop else 3)
    assert st["item_dropped_count"] == (4 if drop else 3)
    assert st["log_count/ERROR"] == 1  # the non-item, named with its callback
    s = sqlite_store(tmp_path)
    dl = sorted(d["reason"].split(":")[0] for d in s.dead_letters())
    assert dl == ["invalid key", "not an item", "too large", "unencodable"]
    assert all(d["callback"] == "BadItemsSpider.parse" for d in s.dead_letters())
    docs = list(s.documents())
    prod = next(d for d in docs if d.get("sku") == "A1")
    # encoding rules; a written duplicate's fields win, fields it lacks are kept
    assert (prod["when"], prod["raw"], prod["tags"]) == ("2026-01-02T03:04:00", "aGk=", ["a", "b"])
    assert prod["price"] == ("9.90" if drop else "9.80")
    assert prod["_item_type"] == "Product"
    assert len(docs) == 2
    s.close()


def test_unencodable_items_are_dead_lettered_and_fail_their_request(tmp_path: Path) -> None:
    # before: a cycle or 5,000 levels of nesting raised RecursionError out of the pipeline:
    # neither stored nor dead-lettered, and the request was acked (acked_without_outcome)
    env = write_spiders(tmp_path)
    settings = {
        "SPIDER_MODULES": ["storage_test_spiders"],
        "FEEDS": None,
        "LOG_LEVEL": "INFO",
        "SCALE_FRONTIER_SCHEMES": ["http", "https", "data"],
    }  # the pages are data: URLs
    res = run_crawl(None, settings, tmp_path, spider="unencodable", timeout=90, env=env)
    # a run with dead letters says so in its last lines, and exits non-zero (the setting's default)
    assert res.returncode == 3, res.tail()
    last = [line.strip() for line in res.log.strip().splitlines()[-3:]]
    assert last[0] == "dead letters  2 items could not be stored (in items_dead_letter)", last
    assert last[2] == "exit status   3: the run has 2 dead letters (SCALE_EXIT_CODE_DEAD_LETTERS)", last
    st = res.stats
    assert "scale/frontier/acked_without_outcome" not in st, res.tail()
    assert st["scale/store/dead_lettered"] == 2 and st["scale/store/written"] == 1
    s = sqlite_store(tmp_path)
    reasons = sorted(d["reason"] for d in s.dead_letters())
    s.close()
    assert len(reasons) == 2 and all(r.startswith("unencodable: field ") for r in reasons), reasons
    assert "holds a cycle" in reasons[0] and "nested deeper than 100 levels" in reasons[1], reasons
    from scrapy_scale.frontier import open_store as open_frontier

    f = open_frontier(f"sqlite:///{tmp_path}/state/frontier.db", "unencodable")
    try:
        status = f.status()
    finally:
        f.close()
    # the two pages whose item could not be stored failed (requeue parse_failed crawls them again)
    assert status.counts["done"] == 1 and status.counts["failed"] == 2, status
    assert status.failed_by_class == {"parse_failed": 2}, status
    # the summary counts those two requests as the frontier does (before: "requests  ok 3")
    requests = next(line.strip() for line in res.log.splitlines() if line.strip().startswith("requests "))
    assert requests == "requests      ok 1, parse_failed 2", requests
    assert "frontier      1 done, 2 failed, 0 pending (failed: parse_failed 2)" in res.log, res.tail()
    # the exit status is a setting: 0 keeps plain Scrapy's exit 0
    again = run_crawl(
        None, {**settings, "SCALE_EXIT_CODE_DEAD_LETTERS": 0}, tmp_path, spider="unencodable", timeout=90, env=env
    )
    assert again.returncode == 0 and again.stats["scale/store/dead_lettered"] == 2, again.tail()
    assert "exit status" not in again.log[-1500:]


def test_bad_store_url_fails_at_startup(tmp_path: Path) -> None:
    res = run_crawl(
        None,
        {**ONLY_STORE, "SCALE_STORE_URL": "mysql://127.0.0.1/db"},
        tmp_path,
        spider="catalog",
        timeout=60,
        start_urls=["data:,x"],
    )
    assert res.returncode != 0
    assert "bad setting SCALE_STORE_URL = 'mysql://127.0.0.1/db': unknown URL scheme 'mysql'" in res.log


def test_unusable_sqlite_path_fails_at_startup(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    res = run_crawl(
        None,
        {**ONLY_STORE, "SCALE_STORE_URL": f"sqlite:///{tmp_path}/a_file/items.sqlite"},
        tmp_path,
        spider="catalog",
        timeout=60,
        start_urls=["data:,x"],
    )
    assert res.returncode != 0
    assert "SCALE_STORE_URL: cannot open the SQLite file" in res.log


def test_items_reported_scraped_are_in_sqlite_after_kill_9(tmp_path: Path) -> None:
    """item_scraped means stored: kill -9 mid-crawl, then every key the crawl reported
    scraped (fsynced by an extension as the signal fired) is in the SQLite file."""
    env = write_spiders(tmp_path)
    log = tmp_path / "scraped.txt"
    # one page hangs, so the crawl cannot end by itself before the kill, however fast
    with Testbed(hosts=2, pages=300, seed=5, faults=HOLD) as tb:
        proc = start_crawl(
            tb,
            {
                **ONLY_STORE,
                "SPIDER_MODULES": ["example_project.spiders", "storage_test_spiders"],
                "EXTENSIONS": {"storage_test_spiders.ScrapedLog": 0},
                "SCRAPED_LOG": str(log),
                "SCALE_STORE_MAX_LATENCY": 0.05,
                "SCALE_STORE_BATCH_SIZE": 7,
            },
            tmp_path,
            env=env,
        )
        deadline = time.monotonic() + hang_guard(60)
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and len(log.read_text().split()) >= 60:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the crawl ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(hang_guard(10))
    scraped = set(log.read_text().split())
    assert len(scraped) >= 60
    s = sqlite_store(tmp_path)
    stored = {d["_id"] for d in s.documents()}
    s.close()
    assert scraped <= stored, f"{len(scraped - stored)} items reported scraped are not stored"


def kill_store_once_stored(proc, url: str, server, rows: int, down: float) -> None:
    """Wait until ``rows`` items are in the store at ``url``, kill its ``server``, wait
    ``down`` seconds; the crawl must be running throughout."""
    watch = open_store(url, "items")
    watch.open()
    deadline = time.monotonic() + hang_guard(60)
    while time.monotonic() < deadline and proc.poll() is None and watch.count() < rows:
        time.sleep(0.05)
    watch.close()
    assert proc.poll() is None, "the crawl ended before the store could be killed"
    server.kill()
    time.sleep(down)
    assert proc.poll() is None, "the crawl ended while the store was down"


@pytest.mark.serial
def test_mongodb_killed_and_restarted_mid_crawl_nothing_lost(tmp_path: Path, mongo_server) -> None:
    # a short server selection timeout (a URI option wins over the store's 5 s default), so the
    # 4 s outage shows up as failed attempts that the writer retries, not one long wait
    url = f"mongodb://127.0.0.1:{mongo_server.port}/crawl?serverSelectionTimeoutMS=800"
    with Testbed(hosts=2, pages=150, seed=7) as tb:
        proc = start_crawl(
            tb,
            {
                **ONLY_STORE,
                "SCALE_STORE_URL": url,
                "SCALE_STORE_MAX_PENDING": 40,
                "SCALE_STORE_RETRY_MAX_DELAY": 1.0,
                "SCALE_STORE_MAX_LATENCY": 0.05,
            },
            tmp_path,
        )
        kill_store_once_stored(proc, url, mongo_server, rows=30, down=4)
        mongo_server.start()
        res = proc.finish(120)
    assert res.returncode == 0, res.tail()
    st = res.stats
    assert st["scale/store/retries"] >= 1
    assert st["scale/store/pauses"] >= 1, "the crawl did not pause while items piled up"
    assert st["item_scraped_count"] == 300 and st.get("item_dropped_count", 0) == 0
    s = open_store(url, "items")
    keys = {d["_id"] for d in s.documents()}
    s.close()
    assert keys == {page_key(u) for u in tb.detail_urls()}


def _crash_and_resume(tmp_path: Path, settings: dict, store_url: str) -> None:
    """Start the catalog with the add-on (frontier + store), kill -9 it once items are being
    stored, run the same crawl again until it ends: exactly the expected rows, all of one run."""
    with Testbed(hosts=2, pages=150, seed=11, faults=HOLD) as tb:  # HOLD: no drain before the kill
        expected = {page_key(u) for u in tb.detail_urls()}
        proc = start_crawl(tb, settings, tmp_path)
        watch = open_store(store_url, "items")
        deadline = time.monotonic() + hang_guard(60)
        while time.monotonic() < deadline and proc.poll() is None and watch.count() < 60:
            time.sleep(0.05)
        assert proc.poll() is None, "the crawl ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(hang_guard(10))
        killed_at = watch.count()
        assert 0 < killed_at < len(expected)
        tb.set_faults("")
        res = run_crawl(tb, settings, tmp_path, timeout=180)
        assert res.returncode == 0, res.tail()
        docs = list(watch.documents())
        watch.close()
    keys = [d["_id"] for d in docs]
    assert len(keys) == len(set(keys)) == len(expected), f"{len(keys)} rows for {len(expected)} pages"
    assert set(keys) == expected
    assert len({d["_run_id"] for d in docs}) == 1, "the resumed run wrote under another run id"


def test_kill_9_and_resume_with_the_sqlite_frontier(tmp_path: Path) -> None:
    _crash_and_resume(tmp_path, {}, f"sqlite:///{tmp_path}/state/items.sqlite")


def test_kill_9_and_resume_with_redis_frontier_and_mongodb(
    tmp_path: Path, redis_url: str, redis_prefix: str, mongo_uri: str
) -> None:
    store_url = f"{mongo_uri.rstrip('/')}/{redis_prefix.replace('-', '_')}"
    _crash_and_resume(
        tmp_path, {"SCALE_FRONTIER_URL": redis_url, "SCALE_JOB": redis_prefix, "SCALE_STORE_URL": store_url}, store_url
    )


def test_a_second_job_crawling_the_same_pages_keeps_the_first_jobs_rows(tmp_path: Path) -> None:
    """Issue 31: job `products`, crawling `baseline`'s pages into the default store, reported
    `86 stored (0 new, 86 updated)` and relabelled baseline's rows `_job: products`."""
    with Testbed(hosts=1, pages=12, seed=5) as tb:
        first = run_crawl(tb, {"SCALE_JOB": "baseline"}, tmp_path)
        assert first.returncode == 0, first.tail()
        s = sqlite_store(tmp_path)
        try:
            before = {d["_id"]: d for d in s.documents()}
        finally:
            s.close()
        second = run_crawl(tb, {"SCALE_JOB": "products"}, tmp_path)
        assert second.returncode == 0, second.tail()
    n = first.stats["scale/store/written"]
    assert n > 0 and first.stats["scale/store/inserted"] == n
    assert second.stats["scale/store/written"] == second.stats["scale/store/inserted"] == n
    assert "scale/store/updated" not in second.stats or second.stats["scale/store/updated"] == 0
    assert f"({n} new, 0 updated)" in second.log, second.tail()
    s = sqlite_store(tmp_path)
    try:
        docs = list(s.documents())
    finally:
        s.close()
    by_job: dict[str, list[dict]] = {}
    for d in docs:
        by_job.setdefault(d["_job"], []).append(d)
    assert sorted(by_job) == ["baseline", "products"] and len(by_job["baseline"]) == len(by_job["products"]) == n
    assert {d["_id"]: d for d in by_job["baseline"]} == before  # baseline's rows untouched, not relabelled
    assert all(d["_id"].endswith("@products") for d in by_job["products"])
