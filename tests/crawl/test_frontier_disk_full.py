"""A full disk under the SQLite frontier, in real crawls: the state folder is a 16 MB tmpfs
that the test fills with a file (and empties again). Needs root to mount (CI runs as root).

Before: `database or disk is full` was logged on every 0.25 s tick with no backoff, and the
crawl hung even after space came back (a COMMIT that failed left its transaction open, so
every later sync nested in it and never committed)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapy_scale.frontier import open_store
from scrapy_scale.testbed import Testbed
from tests.support.crawling import CrawlProcess, start_crawl
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl

FAILED = "frontier sync failed (will retry with backoff)"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/state`` on a 16 MB tmpfs of its own. Not smaller: each SQLite file's WAL may
    grow to about 4 MB before its automatic checkpoint (1,000 pages), and with 3 MB the disk
    filled again from the WALs alone once the test had freed it (1 run in 6 under load)."""
    state = tmp_path / "state"
    state.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(state)], capture_output=True, text=True
    )
    if mount.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (this test needs root, as CI has): {mount.stderr.strip()}")
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of ``folder``'s file system; returns the filler file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)  # unbuffered: no flush at close to fail
    try:
        for size in (65536, 4096, 512):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def wait_log(proc: CrawlProcess, text: str, timeout: float) -> str:
    deadline = time.monotonic() + hang_guard(timeout)
    while time.monotonic() < deadline:
        log = (proc.run_dir / "crawl.log").read_text(errors="replace")
        if text in log:
            return log
        if proc.poll() is not None:
            raise AssertionError(f"crawl exited ({proc.returncode}) before logging {text!r}:\n{log[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in the log within {timeout}s:\n{log[-3000:]}")


def wait_progress(tb: Testbed, proc: CrawlProcess, served: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + hang_guard(timeout)
    while len(tb.log) < served and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert len(tb.log) >= served, f"only {len(tb.log)} requests served"


SETTINGS = {"CONCURRENT_REQUESTS": 8, "LOG_LEVEL": "INFO", "FEEDS": None}


@pytest.mark.timeout(300)
def test_disk_full_backs_off_logs_little_and_resumes_when_space_returns(tmp_path: Path, small_disk: Path) -> None:
    with Testbed(hosts=2, pages=100, seed=4, faults="slow:/item/*,delay=0.05") as tb:
        proc = start_crawl(tb, SETTINGS, tmp_path)
        wait_progress(tb, proc, 30)
        filler = fill(small_disk)
        wait_log(proc, "frontier sync failed", 60)  # the old and the new wording both start so
        full_at = time.monotonic()
        time.sleep(8)  # the outage: a few seconds of failing syncs
        outage = time.monotonic() - full_at
        filler.unlink()
        res = proc.finish(180)
        expected = len(tb.detail_urls())
    assert res.returncode == 0, res.tail()
    lines = [x for x in res.log.splitlines() if "frontier sync" in x and "ERROR" in x]
    # before: one line per 0.25 s tick; now the first failure, then at most one line per 30 s
    assert 1 <= len(lines) <= 2 + outage / 30, lines
    assert "frontier sync works again after" in res.log
    assert res.stats["item_scraped_count"] >= expected, res.tail()
    store = open_store(f"sqlite:///{small_disk}/frontier.db", "catalog")
    try:
        counts = store.counts()
    finally:
        store.close()
    assert counts["done"] == expected + 10 and not (counts["pending"] or counts["leased"]), counts


@pytest.mark.timeout(300)
def test_a_disk_that_stays_full_stops_the_crawl_past_the_deadline(tmp_path: Path, small_disk: Path) -> None:
    items = tmp_path / "items.sqlite"  # the item store on a disk with room: this is about the frontier
    settings = {**SETTINGS, "SCALE_FRONTIER_ERROR_DEADLINE": 3.0, "SCALE_STORE_URL": f"sqlite:///{items}"}
    with Testbed(hosts=2, pages=100, seed=4, faults="slow:/item/*,delay=0.05") as tb:
        proc = start_crawl(tb, settings, tmp_path)
        wait_progress(tb, proc, 30)
        fill(small_disk)
        res = proc.finish(180)  # before: it never ended
    assert res.returncode == 1, res.tail()
    assert "past the deadline of 3 s" in res.log and "SCALE_FRONTIER_ERROR_DEADLINE" in res.log, res.tail()
    assert "stopped early (frontier_failed)" in res.log, res.tail()
    assert os.path.exists(items)
