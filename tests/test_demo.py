"""The README's first command, exactly as a newcomer runs it: `scrapy crawl catalog`."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.crawling import ROOT

SCRAPY = str(Path(sys.executable).with_name("scrapy"))


def test_scrapy_crawl_catalog_runs_the_demo_and_ends_with_the_summary(tmp_path: Path) -> None:
    state = tmp_path / "state"  # only so that tests do not share (or leave) a .scale folder
    t0 = time.monotonic()
    proc = subprocess.run([SCRAPY, "crawl", "catalog", "-s", f"SCALE_STATE_DIR={state}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=150)
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "No target given: started a testbed of 3 hosts x 60 pages" in out

    head = "scrapy-scale summary: job 'catalog' finished in "
    assert head in out, out[-3000:]
    summary = out[out.rindex(head):]
    last_log_line = re.findall(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[.*$", out, re.M)[-1]
    assert head in last_log_line, f"the summary is not the last thing printed: {last_log_line}"
    print(summary)

    # 3 hosts x 60 products; the demo's faults are all retried away except shop1's /item/60 (404)
    items = 3 * 60 - 1
    db = state / "items.sqlite"
    assert re.search(rf"^  items +{items} stored in sqlite:///{re.escape(str(db))} \({items} new, 0 updated\)$",
                     summary, re.M), summary
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM items").fetchone()[0] == items
    # the planned faults were met and handled, and the reader is told so
    retries = re.search(r"^  retries +(\d+) retries \((.*)\); gave up on 0 requests$", summary, re.M)
    assert retries and int(retries.group(1)) >= 20, summary
    assert "transient" in retries.group(2) and "rate_limited" in retries.group(2)
    assert re.search(r"^  requests +ok \d+, not_found 1$", summary, re.M), summary
    assert re.search(r"^  frontier +\d+ done, 0 failed, 0 pending$", summary, re.M), summary
    assert "look further  scrapy scale status catalog" in summary
    # long enough to watch, short enough to wait for (polite DOWNLOAD_DELAY, see the settings)
    assert 10 < took < 90, f"the demo took {took:.0f}s"
