"""examples/distributed/run.py, the three-worker walkthrough, run as a user runs it: it
starts its own Redis, MongoDB wire server, testbed with proxies and Prometheus, three
workers and a feeder, and exits 0 only with a reconciled report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.crawling import ROOT
from tests.support.hang import hang_guard

pytestmark = [pytest.mark.crawl, pytest.mark.serial]


@pytest.mark.timeout(900)
def test_three_workers_script_reconciles(tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    argv = [sys.executable, str(ROOT / "examples" / "distributed" / "run.py")]
    argv += ["--workdir", str(tmp_path / "work"), "--json", str(report_file), "--hosts", "3", "--pages", "80"]
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=hang_guard(840))
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert "RECONCILED" in res.stdout and "NOT RECONCILED" not in res.stdout, res.stdout
    report = json.loads(report_file.read_text())
    assert report["reconciled"] and not report["problems"], report
    products = 3 * 80
    assert report["stored_rows"] == report["completed_product_requests"] == products
    assert report["duplicates"] == 0
    assert report["frontier"]["failed"] == 0 and report["frontier"]["pending"] == 0
    shares = report["shares"]
    assert sorted(shares) == ["w0", "w1", "w2"]
    # Prometheus scraped every worker: their counts add up to every completed request
    assert sum(s["requests"] for s in shares.values()) == report["completed_requests"]
    assert sum(s["items"] for s in shares.values()) >= products
    # the work was split fairly (the script checks it too): no worker below half its share
    fair = report["completed_requests"] / 3
    assert min(s["requests"] for s in shares.values()) >= fair / 2, shares
    # every request went through the egress pool, spread over its three proxies
    assert sorted(report["egress_requests"]) == ["p1", "p2", "p3"]
    assert sum(report["egress_requests"].values()) >= report["completed_requests"]
    assert report["worker_exit"] == [0, 0, 0]
