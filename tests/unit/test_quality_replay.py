"""Raw snapshots of failed parses and ``scrapy scale replay``: after a layout change, the
fixed spider parses the kept responses again and the missing items are stored, with no
request to the testbed (its log shows none). Real crawls, real SQLite stores and frontier."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrapy_scale.quality.raw_pages import SnapshotDir

pytestmark = pytest.mark.pure


def test_snapshots_are_bounded_oldest_dropped_first(tmp_path: Path) -> None:
    d = SnapshotDir(str(tmp_path / "snaps"), max_count=3, max_bytes=10**6)
    dropped = 0
    for i in range(5):
        dropped += d.write(
            {"url": f"http://a.test/{i}", "fingerprint": f"fp{i}", "cls": "parse_failed", "body": "x" * 100}
        )
    assert dropped == 2
    assert [d.read(n)["url"] for n in d.files()] == [f"http://a.test/{i}" for i in (2, 3, 4)]
    d.write({"url": "http://a.test/3", "fingerprint": "fp3", "cls": "parse_failed", "body": "y"})
    assert len(d.files()) == 3 and d.read(d.files()[-1])["body"] == "y", "one snapshot per fingerprint"
    small = SnapshotDir(str(tmp_path / "small"), max_count=100, max_bytes=400)
    n = sum(
        small.write({"url": f"u{i}", "fingerprint": f"f{i}", "cls": "sample", "body": os.urandom(60).hex()})
        for i in range(10)
    )
    assert n > 0 and sum(os.path.getsize(os.path.join(small.folder, f)) for f in small.files()) <= 400
