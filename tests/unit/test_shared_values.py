"""The one decoder of values read back from shared state (scrapy_scale/shared_values.py)
and the readers that use it, on plain values and a real SQLite file (issue 35)."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scrapy_scale import shared_values as sv

pytestmark = pytest.mark.pure

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (DEEP, "nested deeper"),
        ('{"a": ' * 40 + "1" + "}" * 40, "nested deeper"),
        ("{not json", "not JSON"),
        ("x" * (sv.MAX_CHARS + 1), "characters"),
        (None, "not text"),
    ],
)
def test_a_hostile_value_is_refused_before_json_recurses(raw: Any, why: str) -> None:
    limit = sys.getrecursionlimit()
    with pytest.raises(sv.Refused, match=why):
        sv.loads(raw)
    assert sys.getrecursionlimit() == limit


def test_brackets_inside_strings_do_not_count_and_sane_json_decodes() -> None:
    s = json.dumps({"k": "[" * 500, "paces": {"1": [1.0, 2.0]}, "q": 'a\\"[[['})
    assert sv.depth(s) == 3  # {paces: {1: [...]}}
    assert sv.loads(s.encode())["paces"] == {"1": [1.0, 2.0]}
    # exactly at the bound decodes, one deeper does not
    assert sv.loads("[" * sv.MAX_DEPTH + "]" * sv.MAX_DEPTH) is not None
    with pytest.raises(sv.Refused):
        sv.loads("[" * (sv.MAX_DEPTH + 1) + "]" * (sv.MAX_DEPTH + 1))


@pytest.mark.parametrize(
    ("v", "want"),
    [
        ("1.5", 1.5),
        (b"2", 2.0),
        (3, 3.0),
        ("nan", None),
        (math.inf, None),
        ("1e400", None),
        (10**400, None),
        (True, None),
        ("abc", None),
        (b"\xff", None),
        (None, None),
        ([1], None),
    ],
)
def test_finite(v: Any, want: float | None) -> None:
    assert sv.finite(v) == want


def test_clamp_and_bounds() -> None:
    assert sv.finite(5, 0, 4) is None
    assert sv.clamp(1e300, 0, 60) == (60, True)
    assert sv.clamp(30, 0, 60) == (30, False)
    assert sv.clamp("nan", 0, 60) == (None, False)


@pytest.mark.parametrize(
    ("v", "want"),
    [
        ("1234", 1234),
        (b"99", 99),
        (77, 77),
        (12.0, 12),
        ("notapid", None),
        ("1" * 20, None),
        ("9" * 4000, None),
        ("1e300", None),
        ("0", None),
        ("-5", None),
        (b"\xff\xfe", None),
        (True, None),
        ("12.5", None),
    ],
)
def test_whole_numbers_within_bounds(v: Any, want: int | None) -> None:
    assert sv.whole(v, 1, 2**31 - 1) == want


def test_decode_hash_keeps_the_good_fields_and_says_why_for_the_others() -> None:
    raw = {b"good": b'{"a": 1}', b"\xff\xfe": b"{}", b"deep": DEEP.encode(), b"text": b"x"}
    good, bad = sv.decode_hash(raw)
    assert good == {"good": {"a": 1}}
    assert sorted(k for k, _ in bad) == ["deep", "text", "\ufffd\ufffd"]
    good, bad = sv.decode_hash({b"w/0": b"123", b"w/1": b"\xff"}, as_json=False)
    assert good == {"w/0": "123"} and bad == [("w/1", "not UTF-8: b'\\xff'")]


def test_one_warning_per_key_and_kind_then_again_after_the_period(caplog: pytest.LogCaptureFixture) -> None:
    from scrapy_scale.clock import FakeClock

    clk = FakeClock(0.0)
    w = sv.Warnings(logging.getLogger("t.sv"), every=60.0, clock=clk)
    with caplog.at_level(logging.WARNING, "t.sv"):
        for _ in range(100):
            w.refused("k1", [("f", "not UTF-8")], "what")
            w.warn("k1", "type", "k1 is not a hash")
            w.warn("k2", "type", "k2 is not a hash")
        assert len(caplog.records) == 3
        clk.advance(61.0)
        w.warn("k1", "type", "k1 is not a hash")
    assert len(caplog.records) == 4 and w.given == 4


def test_the_learned_state_in_throttle_db_skips_bad_rows_and_keeps_the_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 35 item 2 (SQLite): a non-UTF-8 row or JSON nested 100,000 deep made the whole
    read fail (RecursionError): every site started from its profile."""
    from scrapy_scale.throttle.shared import SqliteShared

    db = SqliteShared(str(tmp_path / "throttle.db"), "j")
    db.save({"good.test": {"delay": 2.0, "at": time.time()}})
    db.db.execute("INSERT INTO learned VALUES ('j', 'deep.test', ?)", (DEEP,))
    db.db.execute("INSERT INTO learned VALUES ('j', 'bytes.test', ?)", (b"\xff\xfe",))
    with caplog.at_level(logging.WARNING, "scrapy_scale.throttle"):
        for _ in range(3):
            got = db.load()
    db.close()
    assert list(got) == ["good.test"] and got["good.test"]["delay"] == 2.0
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "deep.test" in warned[0] and "bytes.test" in warned[0], warned


def test_a_learned_delay_above_max_delay_is_not_used_with_one_warning() -> None:
    """Issue 35 item 3: a learned delay of 1e6 s was clamped to max_delay (60 s) silently."""
    from scrapy_scale.throttle.learned import check_learned

    now = time.time()
    state, why = check_learned({"delay": 1e6, "at": now}, now, 60.0)
    assert state is None and why is not None and "above max_delay" in why
    state, why = check_learned({"delay": 60.0, "at": now}, now, 60.0)
    assert state is not None and why is None


def test_egress_db_with_deep_json_and_bad_names_reads_the_rest(tmp_path: Path) -> None:
    """Issue 35 item 6 (SQLite): deep JSON in egress.db raised RecursionError out of load()."""
    from scrapy_scale.egress.shared import SqliteState

    st = SqliteState(str(tmp_path / "egress.db"), "j")
    st.db.execute("INSERT INTO egress_health VALUES ('j', 'e1', ?)", (DEEP,))
    st.db.execute("INSERT INTO egress_health VALUES ('j', 'e2', ?)", (json.dumps({"g": 1, "b": 0, "c": 1.0}),))
    st.db.execute("INSERT INTO egress_health VALUES ('j', ?, '{}')", (b"\xff",))
    st.db.execute("INSERT INTO egress_counts VALUES ('j', 'w1', ?)", (DEEP,))
    assert st.load()["e1"] is None and st.load()["e2"]["g"] == 1
    state = st.read_all()
    st.close()
    from scrapy_scale.egress.report import describe

    problems: list[str] = []
    rows = describe(state, problems=problems)
    assert [r["egress"] for r in rows] == ["e2"]
    assert any("counts of worker 'w1' skipped" in p for p in problems), problems


def test_a_bad_pid_or_heartbeat_in_the_frontier_db_is_skipped(tmp_path: Path) -> None:
    """Issue 35 item 5 (SQLite): a pid that is no pid crashed claim_worker (TypeError in
    os.kill); a heartbeat of 1e300 showed a ghost live worker for ever."""
    from scrapy_scale.frontier.backends import open_store

    store = open_store(f"sqlite:///{tmp_path / 'frontier.db'}", "j")
    try:
        store.db.execute("INSERT INTO workers (job, worker, pid, at) VALUES ('j', 'h/0', 'notapid', 0)")
        store.db.execute("INSERT INTO workers (job, worker, pid, at) VALUES ('j', 'h/1', ?, 0)", ("9" * 20,))
        asked: list[int] = []
        wid = store.claim_worker("h", 4242, lambda p: asked.append(p) or True)
        assert wid == "h/0" and asked == []  # never asked about a pid that is none
        now = time.time()
        store.db.execute("INSERT INTO beats (job, worker, at, until) VALUES ('j', 'ghost', ?, 1e300)", (now,))
        store.db.execute("INSERT INTO beats (job, worker, at, until) VALUES ('j', 'w', ?, ?)", (now, now + 30))
        st = store.status()
        assert set(st.workers) == {"w"} and st.live_workers(now) == ["w"]
    finally:
        store.close()


def test_worker_snapshots_skip_ghosts_and_what_does_not_add_up(tmp_path: Path) -> None:
    from scrapy_scale.monitor.worker_status import FileSink, merge, valid

    sink = FileSink(tmp_path)
    now = time.time()
    sink.write("good", {"worker": "good", "until": now + 10, "items_stored": 3})
    sink.write("ghost", {"worker": "ghost", "until": 1e300, "items_stored": 1})
    sink.write("bad", {"worker": "bad", "until": now + 10, "items_stored": "many"})
    (tmp_path / "deep.json").write_text(DEEP)
    docs = valid(sink.read(), now)
    assert [d["worker"] for d in docs] == ["good"] and merge(docs)["items_stored"] == 3


@pytest.mark.parametrize("pid", [0, -1, 10**20, 2**31, True, "123", None])
def test_pid_alive_says_no_for_what_is_no_pid(pid: Any) -> None:
    """A 20-digit pid made os.kill raise OverflowError; 0 and -1 asked about process groups."""
    from scrapy_scale.pids import pid_alive

    assert pid_alive(pid) is False


def test_pid_alive_still_sees_this_process() -> None:
    import os

    from scrapy_scale.pids import pid_alive

    assert pid_alive(os.getpid()) is True
