"""No site lost to a burst: an entry page that fails for a few seconds comes back with a
late retry and its whole subtree is crawled; `scrapy scale status` counts a late retry
as a delayed retry while it waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crawling import ROOT, run_crawl, start_crawl

pytestmark = [pytest.mark.crawl, pytest.mark.serial]

QUICK = {"transient": {"retries": 2, "base": 0.1, "cap": 0.3}}


def test_an_entry_page_that_fails_for_5_s_is_crawled_with_its_subtree(tmp_path):
    # host 1's entry page answers 503, host 2's resets, each for 5 s from its first request;
    # the quick retries are spent in well under a second, the late ones wait 1-2, 2-4, 4-8 s
    faults = "503@1:/,until=5;reset@2:/,until=5"
    late = {"retries": 4, "base": 2, "cap": 8, "deadline": 120}
    with Testbed(hosts=2, pages=30, seed=9, faults=faults) as tb:
        res = run_crawl(
            tb,
            {"SCALE_RETRY_POLICY": QUICK, "SCALE_RETRY_LATE": late, "SCALE_THROTTLE_ENABLED": False},
            tmp_path,
            timeout=240,
        )
        assert res.returncode == 0, res.tail()
        expected = tb.detail_urls()
        failed_503 = tb.count(host="shop1.example.test", path="/", kind="503")
        failed_reset = tb.count(host="shop2.example.test", path="/", kind="reset")
    assert failed_503 >= 3 and failed_reset >= 3  # the burst outlasted the quick retries on both
    assert {i["url"] for i in res.items} >= expected  # every page of both sites
    assert res.stats["scale/retry/late"] >= 2
    assert "scale/gave_up/transient" not in res.stats
    assert "Gave up retrying" not in res.log


def _status(tmp_path: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "scrapy", "scale", "status", "catalog", "--json"]
    argv += ["-s", f"SCALE_STATE_DIR={tmp_path / 'state'}"]
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_status_counts_a_late_retry_as_a_delayed_retry_and_the_crawl_waits_for_it(tmp_path):
    late = {"retries": 2, "base": 60, "cap": 60, "deadline": 600}
    with Testbed(hosts=1, pages=5, seed=9, faults="503@1:/,until=600") as tb:
        proc = start_crawl(
            tb,
            {
                "SCALE_RETRY_POLICY": QUICK,
                "SCALE_RETRY_LATE": late,
                "SCALE_OUTCOME_LOG": str(tmp_path / "outcomes.jsonl"),
            },
            tmp_path,
        )
        try:
            deadline = time.monotonic() + 120
            late_at = None
            while late_at is None:  # wait for the late retry (from progress: the outcome log)
                assert proc.poll() is None, "the crawl ended while a late retry was due"
                assert time.monotonic() < deadline, "no late retry in the outcome log"
                log = tmp_path / "outcomes.jsonl"
                for line in log.read_text().splitlines() if log.exists() else []:
                    o = json.loads(line)
                    if not o["final"] and o["attempt"] == 3:
                        late_at = o["retry_at"]
                time.sleep(0.2)
            assert late_at - time.time() > 20  # minutes-scale (30-60 s here), not seconds
            st = _status(tmp_path)
            assert st["counts"]["delayed"] >= 1 and st["delayed_retries"] >= 1, st
            assert proc.poll() is None  # still open: the late retry is due
        finally:
            proc.terminate()
            proc.wait(60)
