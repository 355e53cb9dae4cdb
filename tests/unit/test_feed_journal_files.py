"""scrapy_scale.storage.feeds.FeedJournal: plain Python, real files, real processes."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from scrapy_scale.storage.feed_files import CutReport, FeedFile, cut_back, parse_record
from scrapy_scale.storage.feeds import MAX_LINE, FeedJournal, JournalWriteError, journal_folder, owner_of

pytestmark = pytest.mark.pure


def test_keys_round_trip_and_bad_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    j = FeedJournal(tmp_path / "j", token="1-1")
    j.open()
    j.add([("a", None), ("b", "shop.items.Product")])
    j.add([])
    j.add([("a", None), ("key with\nnewline", None)])
    j.close()
    with open(j.path, "ab") as f:
        f.write(b'not json\n{"a": 1}\n""\n' + json.dumps("c").encode() + b"\n" + b'"cut sho')
    assert list(j.entries_in(j.path)) == [
        ("a", None),
        ("b", "shop.items.Product"),
        ("key with\nnewline", None),
        ("c", None),
    ]
    assert list(j.keys_in(j.path)) == ["a", "b", "key with\nnewline", "c"]  # once each
    assert j.bad_lines == 6  # (each read) not json, empty, the line cut short by a kill
    assert j.feed_files_in(j.path) == [] and j.bad_lines == 7  # {"a": 1}: not an entry, not a feed record
    assert list(j.keys_in(tmp_path / "missing.keys")) == [] and j.bad_lines == 8


def test_hostile_lines_are_skipped_one_by_one(tmp_path: Path) -> None:
    """Before: ``[[[[...`` raised RecursionError out of the read (the journal was abandoned
    and re-read forever), and a line had no length limit."""
    path = tmp_path / "1-1.keys"
    with open(path, "wb") as f:
        f.write(b'"k1"\n' + b"[" * 200_000 + b"\n" + b'"' + b"x" * (MAX_LINE * 5) + b'"\n')
        f.write(b'["k2", "a.B"]\n["k3", "a.B", 1]\n[1, "a.B"]\n"k4"\n' + b"y" * (MAX_LINE + 10))
    j = FeedJournal(tmp_path, token="2-2")
    assert list(j.entries_in(path)) == [("k1", None), ("k2", "a.B"), ("k4", None)]
    assert j.bad_lines == 5  # nested, too long, wrong length, key not a string, too long at the end


def test_job_names_that_clean_alike_get_folders_of_their_own(tmp_path: Path) -> None:
    a, b = journal_folder(str(tmp_path), "shop/de"), journal_folder(str(tmp_path), "shop_de")
    assert a != b and a.parent == b.parent == tmp_path / "feed_journal"
    assert a.name.startswith("shop_de-") and journal_folder(str(tmp_path), "shop/de") == a
    assert journal_folder(str(tmp_path), "x" * 500).name.startswith("x" * 80 + "-")


def test_a_failed_write_raises_and_a_short_write_is_completed(tmp_path: Path) -> None:
    j = FeedJournal(tmp_path / "j", token="1-1")
    j.open()
    os.dup2(os.open("/dev/full", os.O_WRONLY), j.fileno())  # type: ignore[arg-type]  # the disk is full
    with pytest.raises(JournalWriteError, match="No space left"):
        j.add([("k", None)])
    j.close()


def test_adopt_is_taken_once_and_clear_keeps_what_was_not_resent(tmp_path: Path) -> None:
    folder = tmp_path / "j"
    folder.mkdir()
    orphan = folder / "999999999-5.keys"
    orphan.write_text('"k1"\n"k2"\n')
    a, b = FeedJournal(folder, token="1-1"), FeedJournal(folder, token="2-2")
    a.open()
    mine = a.adopt(orphan)
    assert mine is not None and owner_of(mine) == "1-1" and list(a.keys_in(mine)) == ["k1", "k2"]
    assert mine in b.orphans() and b.adopt(mine) is None and b.adopt(a.path) is None  # locked while they live
    assert b.adopt(orphan) is None  # another worker starting at the same time: only one takes it
    other = folder / "999999999-6.keys"
    other.write_text('"k3"\n')
    not_resent = a.adopt(other)
    assert not_resent is not None
    a.clear([mine])
    assert sorted(p.name for p in folder.iterdir()) == [not_resent.name]  # tried again by the next run


def _feed_file(path: Path, start: int) -> FeedFile:
    st = os.stat(path)
    return FeedFile(str(path), start, st.st_dev, st.st_ino)


def test_feed_records_round_trip_hostile_ones_are_skipped_and_a_cut_mark_voids_them(tmp_path: Path) -> None:
    j = FeedJournal(tmp_path / "j", token="1-1")
    j.open()
    first, second = FeedFile("/out/a.jsonl", 10, 1, 2), FeedFile("/out/b.csv", 0, 1, 3)
    j.add_feed_file(first)
    j.add([("k1", None)])
    j.close()
    with open(j.path, "ab") as f:
        for bad in (
            {"feed": "relative.jsonl", "start": 0, "dev": 1, "ino": 2},  # not absolute
            {"feed": "/x", "start": -1, "dev": 1, "ino": 2},
            {"feed": "/x", "start": True, "dev": 1, "ino": 2},  # a bool is no count
            {"feed": "/x", "start": 2**70, "dev": 1, "ino": 2},  # far beyond any file
            {"feed": "/x\u0000y", "start": 0, "dev": 1, "ino": 2},
            {"feed": "/" + "x" * 5000, "start": 0, "dev": 1, "ino": 2},
        ):
            f.write(json.dumps(bad).encode() + b"\n")
        f.write(b"{not json\n")
    assert j.feed_files_in(j.path) == [first] and j.bad_lines == 6  # the overlong line: counted once, by
    assert list(j.keys_in(j.path)) == ["k1"] and j.bad_lines == 7  # entries_in; the records are not entries
    assert j.void_feed_files([j.path, tmp_path / "missing" / "x.keys"])[0].startswith(str(tmp_path / "missing"))
    with open(j.path, "ab") as f:
        f.write(json.dumps(second.record()).encode() + b"\n")
    assert j.feed_files_in(j.path) == [second]  # the records before the mark were cut back already
    assert parse_record([1]) is None and parse_record(first.record()) == first


def test_cut_back_keeps_older_output_and_removes_files_a_killed_run_began(tmp_path: Path) -> None:
    appended = tmp_path / "a.jsonl"
    appended.write_bytes(b'{"old": 1}\n')
    older = _feed_file(appended, appended.stat().st_size)
    with open(appended, "ab") as f:
        f.write(b'{"killed": 1}\n{"kil')  # the killed run's lines, the last cut short
    new = tmp_path / "b.json"
    new.write_bytes(b'[\n{"killed": 1},\n{"kil')  # an array the kill left unterminated
    replaced = tmp_path / "c.xml"
    replaced.write_bytes(b"<items>")
    stale = _feed_file(replaced, 0)
    replaced.rename(tmp_path / "c.old")  # (kept: its inode is not reused)
    replaced.write_bytes(b"<items><item/></items>")  # another file at that path since (another inode)
    shorter = tmp_path / "d.csv"
    shorter.write_bytes(b"a,b\n")
    report = cut_back(
        [
            older,
            FeedFile(older.path, older.start + 5, older.dev, older.ino),  # a later run's: the earliest wins
            _feed_file(new, 0),
            stale,
            dataclasses.replace(_feed_file(shorter, 0), start=100),
            FeedFile(str(tmp_path / "gone.jsonl"), 0, 1, 1),  # removed since: nothing to do
        ]
    )
    assert appended.read_bytes() == b'{"old": 1}\n' and not new.exists()
    assert replaced.read_bytes() == b"<items><item/></items>" and shorter.read_bytes() == b"a,b\n"
    assert report.cut == [(str(appended), 30, 11)] and report.removed == [(str(new), 22)]
    assert [p for p, _ in report.left] == [str(replaced), str(shorter)]
    assert "shorter (4 bytes)" in report.text() and "may appear twice" in report.text()
    assert not cut_back([older]) and not CutReport()  # done already: nothing to say


def test_an_empty_file_a_killed_run_created_before_it_said_which_is_removed(tmp_path: Path) -> None:
    """A kill between creating a feed file and recording its inode (CI saw a %(time)s file of
    0 bytes kept beside the resumed run's): the record made before creating it lets the cut
    remove an empty file there, and only an empty one."""
    from scrapy_scale.storage.feed_files import will_create

    empty, written = tmp_path / "stamped-1-a.csv", tmp_path / "stamped-1-b.csv"
    empty.write_bytes(b"")
    written.write_bytes(b"sku\n1\n")  # not empty: not a file it wrote nothing to
    report = cut_back([will_create(str(empty)), will_create(str(written)), will_create(str(tmp_path / "never"))])
    assert not empty.exists() and report.removed == [(str(empty), 0)]
    assert written.read_bytes() == b"sku\n1\n" and [p for p, _ in report.left] == [str(written)]
