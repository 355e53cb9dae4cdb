"""Raw snapshots of failed parses and ``scrapy scale replay``: after a layout change, the
fixed spider parses the kept responses again and the missing items are stored, with no
request to the testbed (its log shows none). Real crawls, real SQLite stores and frontier."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings

from scrapy_scale.quality import judged
from scrapy_scale.quality.raw_pages import SnapshotDir
from scrapy_scale.quality.replay_plan import plan

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


JUDGED = {"SCALE_CRITICAL_FIELDS": {"*": ["sku", "price"]}}


def snapshot(fp: str, judged_with: Any = None, **extra: Any) -> dict[str, Any]:
    snap = {
        "url": f"http://a.test/{fp}",
        "status": 200,
        "headers": {"Content-Type": ["text/html"]},
        "body": base64.b64encode(b"<html></html>").decode(),
        "request": {"url": f"http://a.test/{fp}", "body": ""},
        "fingerprint": fp,
        "cls": "parse_failed",
        "spider": "catalog",
    }
    if judged_with is not None:
        snap[judged.FIELD] = judged_with
    snap.update(extra)
    return snap


def test_replay_judges_with_the_settings_recorded_with_the_snapshots(tmp_path: Path) -> None:
    d = SnapshotDir(str(tmp_path / "snaps"))
    d.write(snapshot("fp1", JUDGED))
    d.write(snapshot("fp2", JUDGED))
    p = plan(d, "parse_failed", Settings())
    assert sorted(s["fingerprint"] for s in p.loaded.values()) == ["fp1", "fp2"] and not p.left
    assert p.settings == JUDGED
    assert p.notes == ['judged with the settings recorded by the crawl: SCALE_CRITICAL_FIELDS={"*": ["sku", "price"]}']


def test_a_setting_given_on_the_command_line_wins_and_is_said(tmp_path: Path) -> None:
    d = SnapshotDir(str(tmp_path / "snaps"))
    d.write(snapshot("fp1", {**JUDGED, "SCALE_ITEM_KEY": {"*": ["sku"]}}))
    s = Settings()
    s.set("SCALE_CRITICAL_FIELDS", "sku", priority="cmdline")
    s.set("SCALE_ITEM_KEY", "url", priority="project")  # the project's: the recorded one wins
    p = plan(d, "parse_failed", s)
    assert p.settings == {"SCALE_ITEM_KEY": {"*": ["sku"]}}
    assert any(n.startswith("SCALE_CRITICAL_FIELDS given on the command line is used") for n in p.notes), p.notes


def test_snapshots_judged_by_other_settings_are_left_for_another_replay(tmp_path: Path) -> None:
    d = SnapshotDir(str(tmp_path / "snaps"))
    d.write(snapshot("old", JUDGED))
    d.write(snapshot("new", {"SCALE_CRITICAL_FIELDS": {"*": ["sku"]}}))
    p = plan(d, "parse_failed", Settings())
    assert [s["fingerprint"] for s in p.loaded.values()] == ["old"] and len(p.left) == 1
    s = Settings()
    s.set("SCALE_CRITICAL_FIELDS", "sku", priority="cmdline")
    assert len(plan(d, "parse_failed", s).loaded) == 2, "with the setting given, they are judged alike"


HOSTILE_RECORDS = [
    "sku,price",
    ["SCALE_CRITICAL_FIELDS"],
    {"SCHEDULER": "evil.Scheduler"},
    {"SCALE_CRITICAL_FIELDS": 5},
    {"SCALE_CRITICAL_FIELDS": None},
    {"SCALE_CRITICAL_FIELDS": {"*": [""]}},
    {"SCALE_CRITICAL_FIELDS": {"": ["sku"]}},
    {"SCALE_QUALITY_SCHEMAS": {"*": "/etc/passwd"}},
    {"SCALE_QUALITY_SCHEMAS": {"*": {"type": 12}}},
    {"SCALE_QUALITY_SCHEMAS": []},
    {"SCALE_ITEM_KEY": {"*": []}},
    {"SCALE_STORE_MAX_ITEM_BYTES": float("nan")},
    {"SCALE_STORE_MAX_ITEM_BYTES": float("inf")},
    {"SCALE_STORE_MAX_ITEM_BYTES": 10**30},
    {"SCALE_STORE_MAX_ITEM_BYTES": True},
    {"SCALE_CRITICAL_FIELDS": ["x" * 10] * 200_000},
]


@pytest.mark.parametrize("record", HOSTILE_RECORDS, ids=range(len(HOSTILE_RECORDS)))
def test_a_bad_record_falls_back_to_the_current_settings_with_one_warning(
    tmp_path: Path, record: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError):
        judged.read(record)
    d = SnapshotDir(str(tmp_path / "snaps"))
    d.write(snapshot("bad1", record))
    d.write(snapshot("bad2", record))
    s = Settings()
    s.set("SCALE_CRITICAL_FIELDS", "sku,price", priority="project")
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.quality.replay_plan"):
        p = plan(d, "parse_failed", s)
    assert len(p.loaded) == 2 and p.settings == {}, "judged with the current settings"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no usable record of the settings" in warnings[0].getMessage()
    assert any("judged with this command's settings" in n for n in p.notes), p.notes


def test_a_snapshot_without_a_record_is_judged_with_the_current_settings_and_said(tmp_path: Path) -> None:
    d = SnapshotDir(str(tmp_path / "snaps"))
    d.write(snapshot("older"))
    p = plan(d, "parse_failed", Settings())
    assert len(p.loaded) == 1 and p.settings == {}
    assert "no record of them" in p.notes[0]


def test_unreadable_snapshot_files_are_skipped_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = SnapshotDir(str(tmp_path / "snaps"))
    d.write(snapshot("good", JUDGED))
    bad = {
        "notgzip": b"not gzip at all",
        "notjson": gzip.compress(b"{nope"),
        "list": gzip.compress(b"[1, 2]"),
        "status": gzip.compress(json.dumps(snapshot("s", JUDGED, status="200; DROP")).encode()),
        "body": gzip.compress(json.dumps(snapshot("b", JUDGED, body="%%%")).encode()),
        "headers": gzip.compress(json.dumps(snapshot("h", JUDGED, headers={"a": 5})).encode()),
        "class": gzip.compress(
            json.dumps(snapshot("c", JUDGED, request={"url": "http://a.test/c", "_class": "os.system"})).encode()
        ),
    }
    for i, (fp, data) in enumerate(bad.items()):
        (tmp_path / "snaps" / f"{i:020d}-parse_failed-{fp}.json.gz").write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="scrapy_scale.quality.replay_plan"):
        p = plan(d, "parse_failed", Settings())
    assert [s["fingerprint"] for s in p.loaded.values()] == ["good"]
    assert len(p.unreadable) == len(bad) and len(d.files()) == len(bad) + 1, "kept as they are"
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_snapshots_record_the_settings_that_judged_them() -> None:
    s = Settings({"SCALE_CRITICAL_FIELDS": "sku,price", "SCALE_ITEM_KEY": "sku"})
    rec = judged.record(s)
    assert rec["SCALE_CRITICAL_FIELDS"] == {"*": ["sku", "price"]} and rec["SCALE_ITEM_KEY"] == {"*": ["sku"]}
    assert judged.read(json.loads(json.dumps(rec))) == rec, "a record reads back as written"


def test_the_reports_snapshot_index_skips_unreadable_files(tmp_path: Path) -> None:
    """The snapshot folder is state read back: a file of JSON nested 100,000 deep raised
    RecursionError out of SnapshotDir.index (the report's sample), a truncated gzip EOFError
    and a JSON list TypeError. Each is skipped; the good snapshot is indexed."""
    d = SnapshotDir(str(tmp_path / "snaps"))
    d.write({"url": "http://a.test/good", "fingerprint": "fpgood", "cls": "parse_failed", "body": ""})
    bad = {
        "fpdeep": gzip.compress(("[" * 100_000 + "]" * 100_000).encode()),
        "fpcut": gzip.compress(b'{"url": "http://a.test/cut"}')[:-12],
        "fplist": gzip.compress(b'["http://a.test/list"]'),
        "fpnotgz": b"not gzip",
    }
    for i, (fp, data) in enumerate(bad.items()):
        (tmp_path / "snaps" / f"{i:020d}-parse_failed-{fp}.json.gz").write_bytes(data)
    assert list(d.index()) == ["http://a.test/good"]
