"""scrapy_scale.storage.feeds.FeedJournal: plain Python, real files, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scrapy_scale.storage.feeds import FeedJournal, owner_of, process_token, token_alive


def test_keys_round_trip_and_bad_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    j = FeedJournal(tmp_path / "j", token="1-1")
    j.open()
    j.add(["a", "b"])
    j.add([])
    j.add(["a", "key with\nnewline"])
    j.close()
    with open(j.path, "ab") as f:
        f.write(b'not json\n{"a": 1}\n""\n' + json.dumps("c").encode() + b"\n" + b'"cut sho')
    assert list(j.keys_in(j.path)) == ["a", "b", "key with\nnewline", "c"]  # once each
    assert j.bad_lines == 4  # not json, not a string, empty, the line cut short by a kill
    assert list(j.keys_in(tmp_path / "missing.keys")) == [] and j.bad_lines == 5


def test_a_journal_is_an_orphan_only_when_its_process_is_gone(tmp_path: Path) -> None:
    folder = tmp_path / "j"
    me = FeedJournal(folder)
    me.open()
    assert me.token == process_token(os.getpid()) and token_alive(me.token)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        dead_pid = int(dead.stdout)
        names = {
            "live": process_token(live.pid),  # another worker still running
            "dead": f"{dead_pid}-1",
            "reused": f"{os.getpid()}-0",  # this pid, but another process's start time: a reused pid
            "garbage": "notapid",
        }
        for token in names.values():
            (folder / f"{token}.keys").write_text('"k"\n')
        (folder / f"{me.token}~abc.keys").write_text('"k"\n')  # adopted by me earlier: mine
        orphans = {owner_of(p) for p in me.orphans()}
        assert orphans == {names["dead"], names["reused"], names["garbage"]}
    finally:
        live.kill()
        live.wait()


def test_adopt_is_taken_once_and_clear_keeps_what_was_not_resent(tmp_path: Path) -> None:
    folder = tmp_path / "j"
    folder.mkdir()
    orphan = folder / "999999999-5.keys"
    orphan.write_text('"k1"\n"k2"\n')
    a, b = FeedJournal(folder, token="1-1"), FeedJournal(folder, token="2-2")
    a.open()
    mine = a.adopt(orphan)
    assert mine is not None and owner_of(mine) == "1-1" and list(a.keys_in(mine)) == ["k1", "k2"]
    assert b.adopt(orphan) is None  # another worker starting at the same time: only one takes it
    other = folder / "999999999-6.keys"
    other.write_text('"k3"\n')
    not_resent = a.adopt(other)
    assert not_resent is not None
    a.clear([mine])
    assert sorted(p.name for p in folder.iterdir()) == [not_resent.name]  # tried again by the next run
