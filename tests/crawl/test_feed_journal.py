"""scrapy_scale.storage.feeds.FeedJournal: plain Python, real files, real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrapy_scale.storage.feeds import FeedJournal, owner_of, process_token, token_alive
from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl


def test_a_journal_held_by_a_live_owner_is_never_adopted(tmp_path: Path) -> None:
    """Two processes: the owner's pid means nothing here (as for a worker of another host
    sharing the state folder), only its lock keeps its journal from being taken."""
    folder = tmp_path / "j"
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib\n"
            "from scrapy_scale.storage.feeds import FeedJournal\n"
            f"j = FeedJournal(pathlib.Path({str(folder)!r}), token='999999999-7')\n"
            "j.open(); j.add([('k', None)]); print('ready', flush=True); sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "ready\n"
        me = FeedJournal(folder, token="1-1")
        held = folder / "999999999-7.keys"
        assert me.orphans() == [held]  # by its pid alone it looks dead
        assert me.adopt(held) is None and held.exists()  # its lock says otherwise
    finally:
        assert owner.stdin is not None
        owner.stdin.close()
        owner.wait(hang_guard(10))
    mine = me.adopt(held)  # the owner is gone: its lock with it
    assert mine is not None and list(me.keys_in(mine)) == ["k"] and not held.exists()
    other = FeedJournal(folder, token="3-3")
    assert other.orphans() == [mine] and other.adopt(mine) is None  # now held by me
    me.close()


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
