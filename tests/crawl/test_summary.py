"""The run summary (scrapy_scale.monitor.summary) at the end of real `scrapy crawl` runs."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from scrapy_scale.monitor.summary import RunFacts, render
from scrapy_scale.testbed import Testbed
from tests.support.crawling import run_crawl

pytestmark = pytest.mark.crawl

HEAD = "scrapy-scale summary: job "


def summary_of(log: str) -> str:
    """The summary block: from its head line to the end of the log."""
    assert HEAD in log, f"no run summary in the log; tail:\n{log[-3000:]}"
    return log[log.rindex(HEAD) :]


def row(summary: str, label: str) -> str:
    m = re.search(rf"^  {label} +(.*)$", summary, re.M)
    assert m, f"no {label!r} line in:\n{summary}"
    return m.group(1)


def test_summary_with_the_add_on_tells_what_happened(tmp_path: Path) -> None:
    faults = "429@1:/item/2,first=1,retry_after=1; 404@2:/item/5; 500@1:/item/7,first=99"
    settings = {"SCALE_RETRY_POLICY": {"transient": {"retries": 2, "base": 0.05, "cap": 0.1}}}
    with Testbed(hosts=2, pages=20, seed=5, faults=faults) as tb:
        res = run_crawl(tb, settings, tmp_path, timeout=90)
        served = len(tb.log)
        again = run_crawl(tb, settings, tmp_path, timeout=90)  # same state: a new run of the finished job
    assert res.returncode == 0, res.tail()
    s = summary_of(res.log)
    # the summary is the very last thing the crawl prints, after Scrapy's own stats dump
    assert res.log.rindex("Dumping Scrapy stats") < res.log.rindex("Spider closed (finished)") < res.log.rindex(HEAD)
    assert s.splitlines()[0].endswith("job 'catalog' finished in " + s.splitlines()[0].rsplit(" in ", 1)[1])
    assert 6 <= len(s.strip().splitlines()) <= 15, s

    # every number agrees with what really happened: the testbed's log and the item store
    assert row(s, "pages").startswith(f"{served} responses (")  # no resets here: one response per request
    items = 40 - 2  # /item/5 of shop2 is gone, /item/7 of shop1 never stops failing
    state = tmp_path / "state"
    db = state / "items.sqlite"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM items").fetchone()[0] == items
    assert row(s, "items") == f"{items} stored in sqlite:///{db} ({items} new, 0 updated)"
    outcomes = dict(kv.rsplit(" ", 1) for kv in row(s, "requests").split(", "))
    assert outcomes == {"ok": str(res.stats["scale/outcome/ok"]), "not_found": "1", "transient": "1"}
    assert row(s, "retries") == "3 retries (transient 2, rate_limited 1); gave up on 1 requests (transient 1)"
    assert row(s, "classes").startswith("not_found:")  # a line per class seen, explaining it
    assert re.search(r"^ +transient: +a passing error", s, re.M) and re.search(r"^ +rate_limited: ", s, re.M)
    done = res.stats["scale/outcome/ok"] + 1
    assert row(s, "frontier") == f"{done} done, 1 failed, 0 pending (failed: transient 1)"
    assert row(s, "look further") == f"scrapy scale status catalog -s SCALE_STATE_DIR={state}"

    assert again.returncode == 0, again.tail()
    s2 = summary_of(again.log)
    assert row(s2, "items") == f"{items} stored in sqlite:///{db} (0 new, {items} updated)"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM items").fetchone()[0] == items


def test_summary_of_a_plain_scrapy_crawl_leaves_out_what_is_not_there(tmp_path: Path) -> None:
    # no add-on: only the summary extension, next to Scrapy's own retry middleware
    settings = {"ADDONS": {}, "EXTENSIONS": {"scrapy_scale.monitor.summary.RunSummary": 0}, "RETRY_TIMES": 1}
    with Testbed(hosts=1, pages=10, seed=2, faults="500:/item/3,first=99") as tb:
        res = run_crawl(tb, settings, tmp_path, timeout=90)
    assert res.returncode == 0, res.tail()
    s = summary_of(res.log)
    assert row(s, "items") == "9 scraped (no scrapy-scale item store enabled)"
    assert row(s, "retries") == "1 retries; gave up on 1 requests"
    assert "frontier" not in s and "look further" not in s and "requests " not in s


def test_blocked_without_an_egress_pool_does_not_promise_another_egress(tmp_path: Path) -> None:
    """An all-403 run without SCALE_EGRESSES: the retries went out the same way, and the
    summary's line for the class says so (it said "retried through another egress")."""
    settings = {"SCALE_RETRY_POLICY": {"blocked": {"retries": 1, "base": 0.01, "cap": 0.02}}}
    with Testbed(hosts=1, pages=3, seed=1, faults="403:/*") as tb:
        res = run_crawl(tb, settings, tmp_path, timeout=90)
    s = summary_of(res.log)
    line = re.search(r"blocked: +(.*)$", s, re.M)
    assert line, s
    assert "another egress" not in line.group(1) and "no egress pool" in line.group(1), s
    # with a pool the line keeps its meaning
    with_pool = render({"scale/outcome/blocked": 1}, RunFacts(job="j", reason="finished", duration=1.0))
    assert any("blocked:" in x and "through another egress" in x for x in with_pool), with_pool
