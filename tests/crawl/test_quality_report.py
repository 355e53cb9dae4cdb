"""The end-of-run consistency report: real crawls of the catalog against the testbed, one
after another on the same job, so each run is compared with the earlier ones; the HTML page
rendered in headless Chromium."""

from __future__ import annotations

import json
import struct
import subprocess
import textwrap
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.testbed import Testbed
from tests.crawl.test_commands import scale
from tests.support import system_tools
from tests.support.crawling import UNPACED, run_crawl, start_crawl, wait_live_workers

pytestmark = pytest.mark.crawl

ADDON = {"ADDONS": {"scrapy_scale.Addon": 0}, **UNPACED}  # pacing is not under test here
CRITICAL = {"SCALE_CRITICAL_FIELDS": ["sku", "price"]}


def report_of(tmp_path: Path, job: str = "catalog", run: str | None = None) -> dict:
    folder = tmp_path / "state" / "quality" / job
    name = "report.json" if run is None else f"report-{run}.json"
    return json.loads((folder / name).read_text())


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_layout_change_is_flagged_against_the_previous_clean_run(tmp_path: Path) -> None:
    settings = {**ADDON, **CRITICAL, "SCALE_QUALITY_EXIT_CODE": 4, "SCALE_QUALITY_FINISH_REASON": "quality_failed"}
    with Testbed(hosts=1, pages=40, seed=3) as tb:
        first = run_crawl(tb, settings, tmp_path)
        assert first.returncode == 0, first.tail()
        r1 = report_of(tmp_path)
        assert r1["ok"] and first.stats["scale/quality/report/ok"] == 1
        assert first.stats["finish_reason"] == "finished"

        second = run_crawl(tb, settings, tmp_path)  # a clean run again: now compared with the first
        assert second.returncode == 0, second.tail()
        r2 = report_of(tmp_path)
        assert r2["run_id"] != r1["run_id"] and r2["baseline_runs"] == [r1["run_id"]]
        assert r2["ok"], r2["summary"]
        c2 = checks(r2)
        assert all(c["ok"] is True for c in c2.values()), [c for c in c2.values() if c["ok"] is not True]
        assert c2["missing_rate:price"]["value"] == 0.0
        assert c2["items_per_request:parse_item"]["value"] == 1.0

        tb.set_faults("layout:/item/*,after=30,variant=missing")  # the site changes its layout
        third = run_crawl(tb, settings, tmp_path)
    assert third.returncode == 4, third.tail()
    r3 = report_of(tmp_path)
    assert not r3["ok"]
    c3 = checks(r3)
    miss = c3["missing_rate:price"]
    assert miss["ok"] is False and miss["value"] == 0.25 and miss["compared_with"] == 0.0
    assert "rose against 0.0%" in miss["message"]
    assert c3["missing_rate:sku"]["ok"] is True
    assert c3["items_per_request:parse_item"]["ok"] is False  # 30 stored for 40 completed
    assert c3["quarantined"]["ok"] is False
    assert r3["baseline_runs"] == [r1["run_id"], r2["run_id"]]
    assert third.stats["finish_reason"] == "quality_failed"
    assert third.stats["scale/quality/report/ok"] == 0
    assert third.stats["scale/quality/check_failed/missing_rate:price"] == 1
    assert "check(s) failed" in third.log and "FAILED missing_rate:price" in third.log
    # the history draws every run: the price line rises at the last one
    assert [h["missing_rates"]["price"] for h in r3["history"]] == [0.0, 0.0, 0.25]
    assert [h["clean"] for h in r3["history"]] == [True, True, False]
    html = (tmp_path / "state" / "quality" / "catalog" / "report.html").read_text()
    assert "<svg" in html and "FAIL" in html and "missing_rate:price" in html
    # the sample: seeded, of the run's stored rows, with source URLs
    assert len(r3["sample"]) == 20 and all(s["source_url"] in tb.detail_urls() for s in r3["sample"])
    screenshot_is_not_blank(tmp_path / "state" / "quality" / "catalog" / "report.html", tmp_path)


def test_an_unfinished_run_is_reported_but_judged_only_when_it_finishes(tmp_path: Path) -> None:
    settings = {
        **ADDON,
        "SCALE_QUALITY_EXPECT": {"parse_item": 2},
        "SCALE_QUALITY_EXIT_CODE": 4,
        "CONCURRENT_REQUESTS": 2,
    }
    with Testbed(hosts=1, pages=40, seed=8) as tb:
        cut = run_crawl(tb, {**settings, "CLOSESPIDER_PAGECOUNT": 8}, tmp_path)
        assert cut.returncode == 0, cut.tail()  # a failing check, but the run goes on next time
        r = report_of(tmp_path)
        assert r["finished"] is False and r["close_reason"] == "closespider_pagecount" and not r["ok"]
        assert "which has not finished (closed: closespider_pagecount)" in cut.log
        rest = run_crawl(tb, settings, tmp_path)  # resumes the run to its end
    assert rest.returncode == 4, rest.tail()
    r = report_of(tmp_path)
    assert r["finished"] is True and r["run_id"] == str(cut.stats["scale/frontier/run"])
    assert checks(r)["items_per_request:parse_item"]["ok"] is False
    assert rest.stats["finish_reason"] == "finished", "SCALE_QUALITY_FINISH_REASON is not set"


DUPES_SPIDER = '''
from example_project.spiders.catalog import CatalogSpider


class DupesSpider(CatalogSpider):
    """The catalog, plus forced duplicates: on pages 1, 11, 21... the same item twice (the
    same key), on pages 2, 12, 22... a second product with the same content."""

    name = "catalog_dupes"

    def parse_item(self, response):
        n = int(response.url.rsplit("/", 1)[1])
        for item in super().parse_item(response):
            yield item
            if n % 10 == 1:
                yield dict(item)
            if n % 10 == 2:
                yield dict(item, sku=item["sku"] + "-copy")
'''


@pytest.mark.parametrize("backend", ["sqlite", "mongodb"])
def test_forced_duplicates_are_counted_exactly_in_run_and_in_store(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    pkg = tmp_path / "spiders_pkg"
    pkg.mkdir()
    (pkg / "quality_dupes.py").write_text(textwrap.dedent(DUPES_SPIDER))
    settings = {
        **ADDON,
        "SPIDER_MODULES": ["example_project.spiders", "quality_dupes"],
        "SCALE_ITEM_KEY": "sku",
        "SCALE_QUALITY_CONTENT_FIELDS": ["title", "price"],
        "SCALE_QUALITY_DUPLICATE_KEY": ["url"],
    }
    if backend == "mongodb":
        mongo_uri = request.getfixturevalue("mongo_uri")
        settings["SCALE_STORE_URL"] = f"{mongo_uri.rstrip('/')}/d{uuid.uuid4().hex[:10]}"
    with Testbed(hosts=1, pages=40, seed=4) as tb:
        res = run_crawl(tb, settings, tmp_path, spider="catalog_dupes", env={"PYTHONPATH": str(pkg)})
    assert res.returncode == 0, res.tail()
    r = report_of(tmp_path, "catalog_dupes")
    c = checks(r)
    same_key, same_content = 4, 4  # pages 1,11,21,31 and 2,12,22,32
    assert res.stats["scale/store/duplicates_in_run"] == same_key
    assert c["duplicates_in_run:key"]["value"] == same_key
    assert c["duplicates_in_run:content"]["value"] == same_key + same_content  # a re-yield has the same content
    assert r["store"]["rows"] == 40 + same_content
    assert c["duplicates_in_store:key"]["value"] == same_content  # same url
    assert c["duplicates_in_store:content"]["value"] == same_content
    assert all(c[n]["ok"] is False for n in ("duplicates_in_run:key", "duplicates_in_store:content"))
    assert not r["ok"] and res.stats["scale/quality/report/failed"] >= 4


def test_report_command_rebuilds_the_report_of_a_finished_run(tmp_path: Path) -> None:
    with Testbed(hosts=1, pages=12, seed=1) as tb:
        res = run_crawl(tb, {**ADDON, **CRITICAL}, tmp_path)
    assert res.returncode == 0, res.tail()
    written = report_of(tmp_path)
    folder = tmp_path / "state" / "quality" / "catalog"
    for p in folder.glob("report*"):
        p.unlink()
    out = scale_command(tmp_path, "report", "catalog")
    assert out.returncode == 0, out.stderr
    assert "every check passed" in out.stdout
    again = report_of(tmp_path)
    assert again["run_id"] == written["run_id"] and again["ok"]
    assert [c["name"] for c in again["checks"]] == [c["name"] for c in written["checks"]]
    assert (folder / f"report-{written['run_id']}.html").exists()
    bad = scale_command(tmp_path, "report", "nosuchjob")
    assert bad.returncode == 1 and "no quality history" in bad.stderr


def scale_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``scrapy scale ARGS`` from ``tmp_path`` (no project there), in this process (tests/crawl/test_commands.py)."""
    return scale(*args, cwd=tmp_path, settings={"SCALE_STATE_DIR": f"{tmp_path}/state"})


# ---- headless Chromium -------------------------------------------------------------------


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes): width, height, rows of pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line) if bpp == 3 else bytes(x for j, x in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


def screenshot_is_not_blank(page: Path, tmp_path: Path) -> None:
    chromium = system_tools.need("chromium")
    png = tmp_path / "report.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            f"--screenshot={png}",
            "--window-size=1200,900",
            page.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    width, height, rows = png_pixels(png.read_bytes())
    assert (width, height) == (1200, 900)
    pixels = [r[i : i + 3] for r in rows for i in range(0, len(r), 3)]
    colors = set(pixels)
    non_white = sum(1 for p in pixels if p != b"\xff\xff\xff")
    assert len(colors) > 50, f"a blank page: {len(colors)} colours"
    assert non_white > 0.02 * len(pixels), f"a blank page: {non_white} non-white pixels"
    # the verdict badge (red, #c62828) and the chart's first field line (blue, #1f77b4) are drawn
    assert b"\xc6\x28\x28" in colors, "no FAIL badge in the screenshot"
    assert b"\x1f\x77\xb4" in colors, "no missing-rate line in the screenshot"


def test_review_writes_the_sample_and_its_verdicts_show_in_the_next_report(tmp_path: Path) -> None:
    import csv

    with Testbed(hosts=1, pages=15, seed=2) as tb:
        res = run_crawl(tb, {**ADDON, **CRITICAL, "SCALE_QUALITY_SAMPLE_SIZE": 5}, tmp_path)
    assert res.returncode == 0, res.tail()
    run = report_of(tmp_path)["run_id"]
    out = scale_command(tmp_path, "review", "catalog", "-s", "SCALE_QUALITY_SAMPLE_SIZE=5")
    assert out.returncode == 0, out.stderr
    folder = tmp_path / "state" / "quality" / "catalog"
    sheet = folder / f"review-{run}.csv"
    rows = list(csv.DictReader(sheet.open()))
    assert len(rows) == 5 and all(r["source_url"] in tb.detail_urls() and r["verdict"] == "" for r in rows)
    assert {r["key"] for r in rows} == {s["key"] for s in report_of(tmp_path)["sample"]}, "the report's sample"
    assert (folder / f"review-{run}.html").read_text().count("<tr>") == 6
    # a reviewer fills in the verdict column (one row left unjudged)
    rows[0]["verdict"], rows[0]["note"] = "bad", "price is the old one"
    for r in rows[1:4]:
        r["verdict"] = "ok"
    filled = tmp_path / "filled.csv"
    with filled.open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = scale_command(tmp_path, "review", "catalog", "--verdicts", str(filled))
    assert out.returncode == 0, out.stderr
    assert "4 judged, 3 ok, 1 bad" in out.stdout
    rep = scale_command(tmp_path, "report", "catalog", "-s", "SCALE_QUALITY_SAMPLE_SIZE=5")
    assert rep.returncode == 0, rep.stderr
    # issue 31: review promised that the next report shows the verdicts; the text report did not
    assert f"review of run {run}: 4 row(s) judged, 3 ok, 1 bad" in rep.stdout, rep.stdout
    (review,) = report_of(tmp_path)["reviews"]
    assert (review["run_id"], review["judged"], review["ok"], review["bad"]) == (run, 4, 3, 1)
    assert "price is the old one" in (folder / "report.html").read_text()
    rows[1]["verdict"] = "maybe"
    with filled.open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    bad = scale_command(tmp_path, "review", "catalog", "--verdicts", str(filled))
    assert bad.returncode == 1 and "line 3: verdict 'maybe'" in bad.stderr


def test_report_off_writes_no_report(tmp_path: Path) -> None:
    """README: SCALE_QUALITY_REPORT = True "write the consistency report (JSON and HTML) when
    a crawl ends": False writes none. The same crawl with the default writes one, in the
    folder looked at (so the check is not of the wrong place)."""
    runs = {}
    with Testbed(hosts=1, pages=5, seed=1) as tb:
        for name, more in (("off", {"SCALE_QUALITY_REPORT": False}), ("on", {})):
            res = run_crawl(tb, {**ADDON, **more}, tmp_path / name)
            assert res.returncode == 0, res.tail()
            runs[name] = res
    folder = "state/quality/catalog"
    assert sorted(p.name for p in (tmp_path / "on" / folder).glob("report*")) == [
        "report-" + report_of(tmp_path / "on")["run_id"] + ext for ext in (".html", ".json")
    ] + ["report.html", "report.json"]
    assert not list((tmp_path / "off" / folder).glob("report*"))
    assert "scale/quality/report/ok" in runs["on"].stats
    assert not [k for k in runs["off"].stats if k.startswith("scale/quality/report")]


def test_the_sample_is_the_same_each_time_the_report_of_a_run_is_built(tmp_path: Path) -> None:
    """README: SCALE_QUALITY_SAMPLE_SIZE rows "drawn (seeded, reproducible)": the report
    written at the end of the crawl and the one `scrapy scale report` rebuilds later from
    the store draw the same rows, in the same order (20 of 30: an unseeded draw differs)."""
    with Testbed(hosts=1, pages=30, seed=4) as tb:
        res = run_crawl(tb, ADDON, tmp_path)
    assert res.returncode == 0, res.tail()
    written = report_of(tmp_path)
    assert written["store"]["run_rows"] == 30
    keys = [s["key"] for s in written["sample"]]
    assert len(keys) == len(set(keys)) == 20
    out = scale_command(tmp_path, "report", "catalog")
    assert out.returncode == 0, out.stderr
    again = report_of(tmp_path)
    assert again["run_id"] == written["run_id"] and again["generated_at"] > written["generated_at"]
    assert again["sample"] == written["sample"]


def test_a_first_run_is_judged_by_absolute_thresholds(tmp_path: Path) -> None:
    """No history to compare with: half the detail pages changed layout (no sku: the callback
    yields nothing, `parse_failed` no_items) fails the first run; one page in 40 does not.
    (Before: "every check passed", all info for want of history.)"""
    settings = {**ADDON, **CRITICAL, "SCALE_QUALITY_EXIT_CODE": 4}
    with Testbed(hosts=1, pages=40, seed=3, faults="layout:/item/*,after=20,variant=renamed") as tb:
        bad = run_crawl(tb, settings, tmp_path / "bad")
    assert bad.returncode == 4, bad.tail()
    r = report_of(tmp_path / "bad")
    assert not r["ok"] and r["baseline_runs"] == []
    c = checks(r)
    empty, pf = c["empty_parses:parse_item"], c["class_share:parse_failed"]
    assert empty["ok"] is False and empty["value"] == 0.5 and empty["compared_with"] == 0.1, empty
    assert pf["ok"] is False and pf["value"] > 0.4 and pf["compared_with"] == 0.05, pf
    assert "more than the limit of 10.0%" in empty["message"]
    assert c["empty_parses:parse"]["ok"] is None  # listing pages yield no items: not judged
    assert "FAILED empty_parses:parse_item" in bad.log and "FAILED class_share:parse_failed" in bad.log

    with Testbed(hosts=1, pages=40, seed=3, faults="layout:/item/*,after=39,variant=renamed") as tb:
        good = run_crawl(tb, settings, tmp_path / "good")
    assert good.returncode == 0, good.tail()
    r = report_of(tmp_path / "good")
    c = checks(r)
    assert r["ok"], r["summary"]
    assert c["empty_parses:parse_item"]["ok"] is True and c["empty_parses:parse_item"]["value"] == 0.025
    assert c["class_share:parse_failed"]["ok"] is True and 0 < c["class_share:parse_failed"]["value"] < 0.05


def test_a_crawlspider_first_run_does_not_count_its_listing_pages_as_empty_parses(tmp_path: Path) -> None:
    """Review of issue 19: every CrawlSpider rule request has the callback `_callback`, so its
    listing pages (empty by design) and its item pages shared one key, and a clean first run
    failed the absolute empty-parse limit. Listing pages (requests, no items) are left out of
    that limit; a changed layout on the item pages still fails it."""
    settings = {**ADDON, **CRITICAL, "SPIDER_MODULES": ["tests.support.variant_spiders"], "SCALE_QUALITY_EXIT_CODE": 4}
    with Testbed(hosts=1, pages=40, per_page=4, seed=3) as tb:  # 10 listing pages of 50
        clean = run_crawl(tb, settings, tmp_path / "clean", spider="catalog_crawl")
    assert clean.returncode == 0, clean.tail()
    r = report_of(tmp_path / "clean", "catalog_crawl")
    c = checks(r)["empty_parses:_callback"]
    assert r["ok"] and c["ok"] is True and c["value"] == 0.0, c
    assert "listing pages left out" in c["message"], c  # the listing path ran

    with Testbed(hosts=1, pages=40, per_page=4, seed=3, faults="layout:/item/*,after=20,variant=renamed") as tb:
        bad = run_crawl(tb, settings, tmp_path / "bad", spider="catalog_crawl")
    assert bad.returncode == 4, bad.tail()
    c = checks(report_of(tmp_path / "bad", "catalog_crawl"))["empty_parses:_callback"]
    assert c["ok"] is False and c["value"] == 0.5, c


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_the_workers_of_one_run_give_one_verdict_on_the_whole_run(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Issue 35: three workers of one job, 15% of the item pages with a changed layout: each
    judged the run with the figures saved when it closed (its own, and those of the workers
    that had closed before it), so one exited 4 and the others 0. Every worker now waits for
    the others' final figures: all judge the whole run, alike."""
    settings = {
        **ADDON,
        **CRITICAL,
        "SCALE_JOB": redis_prefix,
        "SCALE_FRONTIER_URL": redis_url,
        "SCALE_FRONTIER_BATCH": 4,
        "SCALE_QUALITY_EXIT_CODE": 4,
        "LOG_LEVEL": "INFO",
    }
    with Testbed(hosts=3, pages=40, seed=35, faults="layout:/item/*,after=34,variant=missing") as tb:
        # nothing answers until the three have joined: two that started first could finish
        # the run (126 requests in 3 s) before a late third began, which then began a run of
        # its own (seen once in ten under load)
        tb.hold()
        procs = [start_crawl(tb, {**settings, "SCALE_FRONTIER_WORKER": f"w{i}"}, tmp_path) for i in range(3)]
        wait_live_workers(redis_prefix, redis_url, 3, procs)
        asked = len(tb.log)
        assert tb.release() >= asked  # whatever was asked before the three joined waited
        results = [p.finish(180) for p in procs]
        changed = {u for u in tb.detail_urls() if int(u.rsplit("/", 1)[1]) > 34}
    assert sum(r.stats.get("scale/quality/quarantined", 0) for r in results) == len(changed)
    assert_one_verdict(results, len(changed))
    assert [r.returncode for r in results] == [4, 4, 4], [r.returncode for r in results]


@pytest.mark.serial
@pytest.mark.timeout(300)
def test_a_fleet_held_open_for_seeds_and_stopped_once_drained_gives_one_verdict(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Stop 38: three workers held open for seeds (``SCALE_FRONTIER_WAIT_FOR_SEEDS``), stopped
    with Ctrl-C once the job had drained, gave three verdicts (10 of 44, 12 of 77 and 18 of
    126 failed parses): only a close with reason "finished" waited for the others' final
    figures. A run the frontier found drained is over, whatever the close reason."""
    import signal

    from scrapy_scale.frontier import open_store

    settings = {
        **ADDON,
        **CRITICAL,
        "SCALE_JOB": redis_prefix,
        "SCALE_FRONTIER_URL": redis_url,
        "SCALE_FRONTIER_BATCH": 4,
        "SCALE_FRONTIER_WAIT_FOR_SEEDS": True,
        "SCALE_QUALITY_EXIT_CODE": 4,
        "LOG_LEVEL": "INFO",
    }
    with Testbed(hosts=3, pages=40, seed=35, faults="layout:/item/*,after=34,variant=missing") as tb:
        procs = [start_crawl(tb, {**settings, "SCALE_FRONTIER_WORKER": f"w{i}"}, tmp_path) for i in range(3)]
        wait_live_workers(redis_prefix, redis_url, 3, procs)
        details = tb.detail_urls()
        store = open_store(redis_url, redis_prefix)
        try:
            deadline = time.monotonic() + 120
            while True:  # every page served and acked, nothing left: the job drained
                served = {f"http://{r.host}:{tb.port}{r.path}" for r in tb.log if r.kind != "robots"}
                st = store.status()
                c = st.counts
                if details <= served and (c["pending"], c["delayed"], c["leased"]) == (0, 0, 0):
                    if c["done"] + c["failed"] == len(served):  # the changed pages failed (parse)
                        break
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs), (c, len(served))
                time.sleep(0.2)
        finally:
            store.close()
        for p in procs:
            p.send_signal(signal.SIGINT)
        results = [p.finish(120) for p in procs]
        changed = {u for u in details if int(u.rsplit("/", 1)[1]) > 34}
    assert all("Received SIGINT" in r.log for r in results), results[0].log[-3000:]
    assert_one_verdict(results, len(changed))


def assert_one_verdict(results: list[Any], failed: int) -> None:
    """Every worker logged the same parse-failure verdict, of the whole run's ``failed``
    failed parses, judged from the three processes' figures."""
    verdicts = []
    for r in results:
        line = next((x for x in r.log.splitlines() if "FAILED class_share:parse_failed" in x), None)
        assert line is not None, r.log[-6000:]
        verdicts.append(line.split("FAILED", 1)[1])
    assert len(set(verdicts)) == 1, "one verdict for the run:\n" + "\n".join(verdicts)
    assert f"({failed} of " in verdicts[0], f"the whole run's {failed} failed parses: {verdicts[0]}"
    assert all("from the figures of 3 process(es)" in r.log for r in results)
