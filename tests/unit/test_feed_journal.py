"""scrapy_scale.storage.feeds.FeedJournal: plain Python, real files, real processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

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
    assert j.bad_lines == 8  # (each read) not json, not a string, empty, the line cut short by a kill
    assert list(j.keys_in(tmp_path / "missing.keys")) == [] and j.bad_lines == 9


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
    os.dup2(os.open("/dev/full", os.O_WRONLY), j._fd)  # type: ignore[arg-type]  # the disk is full
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
